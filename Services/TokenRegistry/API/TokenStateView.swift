import Foundation
import IsletMessages

/// What the registry knows of a token, without the token (a credential): the answer to every route.
public struct TokenStateView: Codable, Sendable, Equatable {
    public var kind: TokenKind
    public var activityId: String?
    public var deviceId: String?
    public var state: TokenState
    public var app: AppTarget
    public var attributesType: String
    public var frequentUpdatesEnabled: Bool
    public var appVersion: String
    /// ``TokenFingerprint`` of the current token.
    public var tokenFingerprint: String
    public var invalidation: TokenRecord.Invalidation?
    public var activityStartedAt: Date?
    public var registeredAt: Date
    public var updatedAt: Date
    /// Whether the owner proved the activity theirs with a ticket (absent: no).
    public var ownerVerified: Bool?
    /// The language the activity is shown in, when the app said (canonical BCP 47).
    public var locale: String?
    /// `true` when the app should register the token again (a push-to-start token invalidated
    /// because a start on it was not confirmed: it may be stale, iOS 27). Absent otherwise. An app
    /// reads it at launch (`GET /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}`)
    /// and then registers its current
    /// push-to-start token again, which makes the key active once more.
    public var registerAgain: Bool?
    /// An activity's records on its other devices (one update token each), on the activity's own
    /// view only; absent when it is on one device.
    public var devices: [TokenStateView]?

    public init(_ record: TokenRecord) {
        self.kind = record.kind
        self.activityId = record.activityId
        self.deviceId = record.deviceId
        self.state = record.state
        self.app = record.app
        self.attributesType = record.attributesType
        self.frequentUpdatesEnabled = record.frequentUpdatesEnabled
        self.appVersion = record.appVersion
        self.tokenFingerprint = TokenFingerprint.of(token: record.token)
        self.invalidation = record.invalidation
        self.activityStartedAt = record.activityStartedAt
        self.registeredAt = record.registeredAt
        self.updatedAt = record.updatedAt
        self.ownerVerified = record.ownerVerified
        self.locale = record.locale
        self.registerAgain = record.state == .invalidated && record.invalidation?.reason == .startUnconfirmed ? true : nil
    }
}
