import Foundation
import IsletMessages
import Synchronization

/// What a service that sends to a token needs of it: a compact read of a ``TokenRecord``.
public struct DeliveryToken: Sendable, Equatable {
    /// The APNs token, lowercase hex.
    public var token: String
    public var app: AppTarget
    public var kind: TokenKind
    public var state: TokenState
    /// The device of a push-to-start token (from its key); `nil` for an update token.
    public var deviceId: String?
    public var frequentUpdatesEnabled: Bool
    public var appVersion: String
    /// The language the app shows the activity in (a canonical ``LanguageTag``), when it said.
    public var locale: String?
    public var registeredAt: Date
    public var activityStartedAt: Date?
    /// Set when the table keeps fingerprints only (``PartitionTokens/whole(fingerprintsOnly:)``):
    /// ``token`` is then empty.
    private var knownFingerprint: String?

    /// The token's fingerprint (``TokenFingerprint``), what outcomes and logs carry of it.
    public var fingerprint: String { knownFingerprint ?? TokenFingerprint.of(token: token) }

    public init(
        token: String, app: AppTarget, kind: TokenKind, state: TokenState, deviceId: String?, frequentUpdatesEnabled: Bool, appVersion: String,
        registeredAt: Date, activityStartedAt: Date?, fingerprint: String? = nil, locale: String? = nil
    ) {
        self.knownFingerprint = fingerprint
        self.locale = locale
        self.token = token
        self.app = app
        self.kind = kind
        self.state = state
        self.deviceId = deviceId
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.registeredAt = registeredAt
        self.activityStartedAt = activityStartedAt
    }

    public init(_ record: TokenRecord) {
        self.init(
            token: record.token, app: record.app, kind: record.kind, state: record.state,
            deviceId: record.kind == .pushToStart ? record.deviceId : nil, frequentUpdatesEnabled: record.frequentUpdatesEnabled,
            appVersion: record.appVersion, registeredAt: record.registeredAt, activityStartedAt: record.activityStartedAt, locale: record.locale)
    }
}
