import Foundation
import IsletMessages

/// `PUT /v1/activities/{activityId}/token`: register or rotate an activity's update token.
public struct RegisterActivityTokenRequest: Codable, Sendable, Equatable {
    /// `Activity.pushTokenUpdates`, as hex.
    public var token: String
    /// The Swift type name of the activity's `ActivityAttributes`.
    public var attributesType: String
    public var app: AppTarget
    /// `ActivityAuthorizationInfo().frequentPushesEnabled`.
    public var frequentUpdatesEnabled: Bool
    /// `CFBundleShortVersionString`.
    public var appVersion: String
    /// When the activity started on the device.
    public var activityStartedAt: Date?
    /// The app's own identifier of the device (optional).
    public var deviceId: String?
    /// The activity's ticket from its backend (``ActivityTickets``): proves the caller owns the
    /// activity. Optional unless the registry requires tickets.
    public var ticket: String?
    /// The language the app shows the activity in (BCP 47, e.g. `zh-Hans-CN`; Apple's `zh_Hans_CN`
    /// is taken too): its texts and alerts are rendered in it. Absent: the language it was
    /// registered with before, else the templates' default.
    public var locale: String?

    public init(
        token: String, attributesType: String, app: AppTarget, frequentUpdatesEnabled: Bool, appVersion: String,
        activityStartedAt: Date? = nil, deviceId: String? = nil, ticket: String? = nil, locale: String? = nil
    ) {
        self.token = token
        self.attributesType = attributesType
        self.app = app
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.activityStartedAt = activityStartedAt
        self.deviceId = deviceId
        self.ticket = ticket
        self.locale = locale
    }
}

/// `PUT /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}`: register or
/// rotate a push-to-start token (iOS 17.2+).
public struct RegisterPushToStartTokenRequest: Codable, Sendable, Equatable {
    /// `Activity<…>.pushToStartTokenUpdates`, as hex.
    public var token: String
    /// The APNs environment the token was issued for.
    public var environment: APNsEnvironment
    public var frequentUpdatesEnabled: Bool
    public var appVersion: String
    /// The language of the activities it starts (as ``RegisterActivityTokenRequest/locale``).
    public var locale: String?

    public init(token: String, environment: APNsEnvironment, frequentUpdatesEnabled: Bool, appVersion: String, locale: String? = nil) {
        self.token = token
        self.environment = environment
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.locale = locale
    }
}

/// `POST …/invalidate`: the app says the token must not be used any more.
public struct InvalidateRequest: Codable, Sendable, Equatable {
    /// `clientEnded` (the app ended the activity), `userDismissed` or `ineligible`.
    public var reason: InvalidationReason

    public init(reason: InvalidationReason) { self.reason = reason }
}

/// `PUT /v1/activities/{activityId}/frequent-updates`: the user changed the setting.
public struct FrequentUpdatesRequest: Codable, Sendable, Equatable {
    /// `ActivityAuthorizationInfo().frequentPushesEnabled`, as now.
    public var enabled: Bool

    public init(enabled: Bool) { self.enabled = enabled }
}

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
    }
}

/// What a write did.
public struct Change: RawRepresentable, Codable, Sendable, Hashable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A token for a key the registry did not know.
    public static let registered = Change(rawValue: "registered")
    /// A new token replaced the key's previous one.
    public static let rotated = Change(rawValue: "rotated")
    /// A re-registration after APNs invalidated the token.
    public static let reactivated = Change(rawValue: "reactivated")
    /// The activity's owner, proven by a ticket, replaced another user's registration that had none.
    public static let claimed = Change(rawValue: "claimed")
    /// Other fields changed (frequent updates, app version, start time).
    public static let updated = Change(rawValue: "updated")
    /// The same token registered again, more than ``Registry/confirmationInterval`` after its
    /// registration time, which moves on: APNs's verdict on the token from before it is not believed.
    public static let confirmed = Change(rawValue: "confirmed")
    public static let invalidated = Change(rawValue: "invalidated")
    /// The request repeated the current state: nothing was written.
    public static let unchanged = Change(rawValue: "unchanged")
}

/// The answer to a write.
public struct WriteResponse: Codable, Sendable, Equatable {
    public var change: Change
    public var token: TokenStateView
}
