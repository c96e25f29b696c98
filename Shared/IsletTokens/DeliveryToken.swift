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
    /// The owner's user id as a 64-bit FNV-1a hash (``owner(of:)``): whether two records are one
    /// user's, without keeping user ids in every service's table.
    public var owner: UInt64
    /// Set when the table keeps fingerprints only (``PartitionTokens/whole(fingerprintsOnly:)``):
    /// ``token`` is then empty.
    private var knownFingerprint: String?

    /// The token's fingerprint (``TokenFingerprint``), what outcomes and logs carry of it.
    public var fingerprint: String { knownFingerprint ?? TokenFingerprint.of(token: token) }

    public init(
        token: String, app: AppTarget, kind: TokenKind, state: TokenState, deviceId: String?, frequentUpdatesEnabled: Bool, appVersion: String,
        registeredAt: Date, activityStartedAt: Date?, fingerprint: String? = nil, locale: String? = nil, owner: UInt64 = 0
    ) {
        self.owner = owner
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
            deviceId: record.kind == .pushToStart || record.kind == .widget ? record.deviceId : nil, frequentUpdatesEnabled: record.frequentUpdatesEnabled,
            appVersion: record.appVersion, registeredAt: record.registeredAt, activityStartedAt: record.activityStartedAt, locale: record.locale,
            owner: Self.owner(of: record.userId))
    }

    /// `userId` hashed (64-bit FNV-1a over its UTF-8 bytes: the same in every process).
    public static func owner(of userId: String) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in userId.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01B3
        }
        return hash
    }
}
