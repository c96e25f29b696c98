import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

/// The body of `PUT /v1/activities/{activityId}/token` (docs/token-registry.md).
struct TokenRegistrationBody: Encodable, Sendable, Equatable {
    struct App: Encodable, Sendable, Equatable {
        var bundleId: String
        var environment: String
    }
    var token: String
    var attributesType: String
    var app: App
    var frequentUpdatesEnabled: Bool
    var appVersion: String
    var activityStartedAt: Date
    var deviceId: String?
    var ticket: String?
    var locale: String?
}
