import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

/// What the CLI shares for the services' HTTP APIs (token-registry's and content-service's).
enum ServiceHTTP {
    private struct Failure: Decodable {
        var error: String
        var field: String?
        var reason: String?
    }

    /// An ``HTTPAPIError`` body as `status error field F: reason`; another body as it is (500 bytes).
    static func refusal(status: Int, body: [UInt8]) -> String {
        guard let failure = try? JSONDecoder().decode(Failure.self, from: Data(body)) else {
            return "\(status): \(String(decoding: body.prefix(500), as: UTF8.self))"
        }
        var text = "\(status) \(failure.error)"
        if let field = failure.field { text += " field \(field)" }
        if let reason = failure.reason { text += ": \(reason)" }
        return text
    }

    /// `base/v1/activities/{activityId}/then`, the id escaped as one path segment.
    static func activityURL(base: String, activityId: String, then suffix: String) -> String {
        let path = activityId.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? activityId
        return base.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + "/v1/activities/\(path)/\(suffix)"
    }
}
