import Foundation

/// A push token and its state, on the compacted `islet.tokens.v1`: the latest record per key is
/// the token's current state.
///
/// An *update* token belongs to one live activity (keyed by its `activityId`); a *push-to-start*
/// token belongs to one app, device and attributes type (keyed by the push-to-start key) and lets
/// a backend start an activity remotely; a *widget* token belongs to one app, device and widget
/// kind (keyed by the widget key, its kind in `attributesType`) and reloads the app's home-screen
/// widgets of that kind (iOS 26). A newer token for the same key supersedes the old one;
/// an invalidated token is never sent to again. Written only by token-registry.
public struct TokenRecord: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.tokens

    /// Why and when a token was invalidated.
    public struct Invalidation: Codable, Sendable, Hashable {
        /// Why the token may no longer be used.
        public var reason: InvalidationReason
        /// When Islet invalidated the token.
        public var invalidatedAt: Date
        /// The time APNs gave with a 410 answer: since when the token has been invalid. `nil` when
        /// the invalidation did not come from APNs.
        public var apnsTimestamp: Date?
        /// On an activity's own record: `true` when its backend (or Islet) ended it on every
        /// device, not only its first device's app — no device of it registers again. Absent
        /// otherwise (additive).
        public var everyDevice: Bool?
        /// On a push-to-start token retired by `startUnconfirmed`: the activity the unconfirmed
        /// start was to start. The device's registration of that activity's update token shows the
        /// start arrived after all, and makes the token active again. Absent otherwise (additive).
        public var startActivityId: String?

        public init(
            reason: InvalidationReason, invalidatedAt: Date, apnsTimestamp: Date? = nil, everyDevice: Bool? = nil, startActivityId: String? = nil
        ) {
            self.reason = reason
            self.invalidatedAt = invalidatedAt
            self.apnsTimestamp = apnsTimestamp
            self.everyDevice = everyDevice
            self.startActivityId = startActivityId
        }
    }

    public var schemaVersion: Int
    /// Whether this is an update token (one activity) or a push-to-start token (one device).
    public var kind: TokenKind
    /// The activity the token updates. Required for `update` tokens.
    public var activityId: String?
    /// The app's identifier for the device (not an APNs token). Required for `pushToStart` tokens;
    /// may be sent with update tokens too.
    public var deviceId: String?
    /// The user who owns the token: the subject of the JWT the app registered it with.
    public var userId: String
    /// The APNs token, lowercase hex. A credential to push to the user's lock screen: log only a
    /// fingerprint of it, never the token.
    public var token: String
    /// The app and APNs environment the token was issued for.
    public var app: AppTarget
    /// The Swift type name of the widget's `ActivityAttributes`, e.g. `DeliveryAttributes`; for a
    /// `widget` token, the widget's kind (`WidgetInfo.kind`, e.g. `OrderStatusWidget`).
    public var attributesType: String
    /// Whether the app declares `NSSupportsLiveActivitiesFrequentUpdates` and the user left it on:
    /// such activities get a larger priority-10 budget.
    public var frequentUpdatesEnabled: Bool
    /// The app's version (`CFBundleShortVersionString`), which decides the content-state fields it can decode.
    public var appVersion: String
    /// Whether the token may be used.
    public var state: TokenState
    /// Why and when the token was invalidated. Present exactly when `state` is `invalidated`.
    public var invalidation: Invalidation?
    /// When the activity started on the device (update tokens, when the app reports it).
    public var activityStartedAt: Date?
    /// When this token was last registered (a registration of the same token again moves it on).
    public var registeredAt: Date
    /// When this record last changed.
    public var updatedAt: Date
    /// Update tokens: `true` when the user proved with a ticket from the activity's backend that
    /// the activity is theirs (token-registry's `ActivityTickets`); absent (`nil`) when the first
    /// user to register the id was taken as its owner. Added in schema 1 without a version bump:
    /// readers that do not know it ignore it.
    public var ownerVerified: Bool?
    /// The language the app shows its activity in (a ``LanguageTag``, canonical), when it said:
    /// content-service renders the activity's texts and alerts in it. Added in schema 1 without a
    /// version bump: readers that do not know it ignore it.
    public var locale: String?
    /// Update tokens: `true` for the token of one more device of the activity, kept under
    /// `<bundleId>/<activityId>/<deviceId>` (``MessageKey/device(bundleId:activityId:deviceId:)``)
    /// beside the activity's first device's under `<bundleId>/<activityId>`; absent (`nil`) for the
    /// activity's own record. Added in schema 1 without a version bump: readers that do not know it
    /// read such a record under its key and never send to it.
    public var deviceKeyed: Bool?

    public init(
        kind: TokenKind, activityId: String? = nil, deviceId: String? = nil, userId: String, token: String, app: AppTarget,
        attributesType: String, frequentUpdatesEnabled: Bool, appVersion: String, state: TokenState,
        invalidation: Invalidation? = nil, activityStartedAt: Date? = nil, registeredAt: Date, updatedAt: Date,
        ownerVerified: Bool? = nil, locale: String? = nil, deviceKeyed: Bool? = nil, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.kind = kind
        self.activityId = activityId
        self.deviceId = deviceId
        self.userId = userId
        self.token = token
        self.app = app
        self.attributesType = attributesType
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.state = state
        self.invalidation = invalidation
        self.activityStartedAt = activityStartedAt
        self.registeredAt = registeredAt
        self.updatedAt = updatedAt
        self.ownerVerified = ownerVerified
        self.locale = locale
        self.deviceKeyed = deviceKeyed
    }

    /// `<bundleId>/<activityId>` for an update token (activity ids are scoped per app), and
    /// `<bundleId>/<activityId>/<deviceId>` for one more device's (``deviceKeyed``); the
    /// push-to-start key for a push-to-start token (`nil` when the id it needs is missing, which
    /// `validate()` rejects).
    public var key: String? {
        if kind == .pushToStart {
            return deviceId.map { MessageKey.pushToStart(bundleId: app.bundleId, deviceId: $0, attributesType: attributesType) }
        }
        if kind == .widget {
            return deviceId.map { MessageKey.widget(bundleId: app.bundleId, deviceId: $0, kind: attributesType) }
        }
        if deviceKeyed == true {
            guard let activityId, let deviceId else { return nil }
            return MessageKey.device(bundleId: app.bundleId, activityId: activityId, deviceId: deviceId)
        }
        return activityId.map { MessageKey.activity(bundleId: app.bundleId, activityId: $0) }
    }

    /// The key of the activity an update token belongs to (`<bundleId>/<activityId>`), whichever
    /// device's it is.
    public var activityKey: String? {
        kind == .update ? activityId.map { MessageKey.activity(bundleId: app.bundleId, activityId: $0) } : nil
    }

    /// The key an update token had before activity ids were scoped per app (the bare activity id):
    /// records written then are still read under it. `nil` for push-to-start tokens, whose key
    /// has not changed.
    public var legacyKey: String? {
        kind == .update && deviceKeyed != true ? activityId.map(MessageKey.activity) : nil
    }

    public func validate() throws(MessageValidationError) {
        try kind.requireKnown(field: "kind")
        if kind == .update {
            guard let activityId, !activityId.isEmpty else {
                throw MessageValidationError(field: "activityId", problem: "required for an update token")
            }
            try MessageKey.requireActivityId(activityId)
            if deviceKeyed == false {
                throw MessageValidationError(field: "deviceKeyed", problem: "is true or absent")
            }
            if deviceKeyed == true {
                guard let deviceId, !deviceId.isEmpty else {
                    throw MessageValidationError(field: "deviceId", problem: "required for a device's update token (deviceKeyed)")
                }
                try MessageKey.requireDeviceId(deviceId)
            }
        } else {
            guard deviceKeyed == nil else {
                throw MessageValidationError(field: "deviceKeyed", problem: "only update tokens are kept per device")
            }
            guard let deviceId, !deviceId.isEmpty else {
                throw MessageValidationError(field: "deviceId", problem: "required for a \(kind == .widget ? "widget" : "push-to-start") token")
            }
            if kind == .widget {
                guard activityId == nil else {
                    throw MessageValidationError(field: "activityId", problem: "a widget token belongs to a device, not an activity")
                }
                try MessageKey.requireDeviceId(deviceId)
                try MessageKey.requireWidgetKind(attributesType, field: "attributesType")
            }
        }
        guard !token.isEmpty, token.utf8.count.isMultiple(of: 2), token.utf8.allSatisfy(Self.isLowercaseHexDigit) else {
            throw MessageValidationError(field: "token", problem: "must be a non-empty, even-length lowercase hex string")
        }
        try app.environment.requireKnown(field: "app.environment")
        try state.requireKnown(field: "state")
        if state == .invalidated, invalidation == nil {
            throw MessageValidationError(field: "invalidation", problem: "required when state is invalidated")
        }
        if state != .invalidated, invalidation != nil {
            throw MessageValidationError(field: "invalidation", problem: "must be absent when state is \(state)")
        }
        if let locale, LanguageTag(locale)?.description != locale {
            throw MessageValidationError(field: "locale", problem: "must be a canonical language tag (BCP 47), like zh-Hans-CN")
        }
    }

    private static func isLowercaseHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}

