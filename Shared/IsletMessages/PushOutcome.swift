import Foundation

/// The final outcome of one ``PushRequest``, on `islet.push-outcomes.v1`, under the request's key.
///
/// apns-dispatcher writes exactly one per request (at-least-once: a reader may see a repeat, with
/// the same `requestId`). token-registry reads it to invalidate tokens APNs rejected;
/// content-service to know what the device was sent; analytics to count deliveries.
public struct PushOutcome: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.pushOutcomes

    /// What APNs answered to the last attempt.
    public struct APNsResponse: Codable, Sendable, Hashable {
        /// The HTTP status: 200 accepted, 400 bad request, 403 auth, 410 token no longer valid, 429, 5xx.
        public var status: Int
        /// APNs's `reason` on an error, e.g. `BadDeviceToken`, `Unregistered`, `TooManyRequests`.
        public var reason: String?
        /// The `apns-id` APNs answered with (the request's id).
        public var apnsId: String?
        /// With a 410: the time since when APNs knows the token is invalid.
        public var timestamp: Date?
        /// The `apns-unique-id` APNs answered with: the key of the delivery in Apple's Push
        /// Notifications Console (delivery log). APNs sends it in the development environment and
        /// with a broadcast's 200; absent otherwise, and in outcomes written before it existed (additive).
        public var uniqueId: String?

        /// APNs says the broadcast's channel does not exist (any more).
        public var saysChannelIsGone: Bool { Self.saysChannelIsGone(status: status, reason: reason) }

        /// Whether an answer to a broadcast says its channel does not exist (any more): `400
        /// ChannelNotRegistered` or `400 BadChannelId`. The one rule the dispatcher and
        /// content-service share.
        public static func saysChannelIsGone(status: Int, reason: String?) -> Bool {
            status == 400 && (reason == "ChannelNotRegistered" || reason == "BadChannelId")
        }

        public init(status: Int, reason: String? = nil, apnsId: String? = nil, timestamp: Date? = nil, uniqueId: String? = nil) {
            self.status = status
            self.reason = reason
            self.apnsId = apnsId
            self.timestamp = timestamp
            self.uniqueId = uniqueId
        }
    }

    public var schemaVersion: Int
    /// The ``PushRequest/requestId`` this is the outcome of.
    public var requestId: String
    /// The request's activity. Exactly one of `activityId`, `pushToStartKey` and `widgetKey` is set.
    public var activityId: String?
    /// The request's push-to-start key. Exactly one of `activityId`, `pushToStartKey` and `widgetKey` is set.
    public var pushToStartKey: String?
    /// The request's widget key (``PushRequest/widgetKey``): the outcome of a WidgetKit push.
    /// Absent otherwise (additive).
    public var widgetKey: String?
    /// The request's app (`app.bundleId`): with `activityId`, the activity it concerns (activity
    /// ids are scoped per app). Absent in outcomes written before it existed.
    public var bundleId: String?
    /// The request's attributes type (`DeliveryAttributes`): what analytics counts deliveries by.
    /// Absent in outcomes written before it existed.
    public var attributesType: String?
    /// What happened to the request.
    public var result: PushResult
    /// APNs's answer to the last attempt; `nil` when APNs was never asked (coalesced, no token, …).
    public var apns: APNsResponse?
    /// The `apns-priority` actually sent (10 may have been downgraded to 5); `nil` if nothing was sent.
    public var priorityUsed: Int?
    /// How many times the request was sent to APNs (0 if never).
    public var attempts: Int
    /// From the request's `createdAt` to the final answer (`completedAt`), in milliseconds: how late
    /// the content reached APNs, queueing and retries included. `nil` if nothing was sent.
    public var latencyMilliseconds: Double?
    /// The token sent to, as its ``TokenFingerprint`` (to correlate without the token itself).
    public var tokenFingerprint: String?
    /// For `coalesced`: the `requestId` of the newer request that replaced this one.
    public var supersededBy: String?
    /// A human-readable explanation, for logs and dashboards.
    public var detail: String?
    /// When the outcome was final.
    public var completedAt: Date
    /// A broadcast's channel (`apns-channel-id`), when it had one: the outcome is the channel's,
    /// for every phone subscribed to it. On the outcome of a push-to-start that starts the activity
    /// on its channel (``PushRequest/channelId``): that channel (the outcome is one phone's).
    public var channelId: String?
    /// The request's ``PushRequest/contentSequence``, on outcomes of attempts that may have reached
    /// the phone: the partition's next dispatcher sends no older content of the activity after it.
    /// Absent in outcomes written before it existed (additive).
    public var contentSequence: Int64?
    /// On a `sending` record, the id of that announcement; on a `retrying`, the id of the
    /// announcement it takes back (an earlier owner's late `retrying` cannot take back a later
    /// owner's announcement). Absent in records written before it existed (additive): such a
    /// `retrying` takes back every announcement of its request.
    public var announcementId: String?
    /// The request's ``PushRequest/deviceId``: the outcome of a copy for one more device of the
    /// activity, about that device's token only. Absent otherwise (additive).
    public var deviceId: String?
    /// The `aps.timestamp` the attempt carried (the request's ``PushRequest/apnsTimestamp``, or a
    /// later one the dispatcher stamped: newer content never goes with a timestamp older than what
    /// the activity was sent, which iOS would ignore), on outcomes of requests that were attempted.
    /// Absent otherwise, and in outcomes written before it existed (additive).
    public var apnsTimestamp: Int64?
    /// On a `startUnconfirmed` (content-service's): the id of the activity the push-to-start was to
    /// start, in the outcome's app — token-registry leaves the push-to-start token alone when it
    /// holds that activity's update token (its own table read it; content-service's had not).
    /// Absent otherwise (additive).
    public var startActivityId: String?

    public init(
        requestId: String, activityId: String? = nil, pushToStartKey: String? = nil, result: PushResult,
        apns: APNsResponse? = nil, priorityUsed: Int? = nil, attempts: Int, latencyMilliseconds: Double? = nil,
        tokenFingerprint: String? = nil, supersededBy: String? = nil, detail: String? = nil, completedAt: Date,
        bundleId: String? = nil, attributesType: String? = nil, channelId: String? = nil, contentSequence: Int64? = nil,
        announcementId: String? = nil, deviceId: String? = nil, apnsTimestamp: Int64? = nil, startActivityId: String? = nil,
        widgetKey: String? = nil, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.startActivityId = startActivityId
        self.widgetKey = widgetKey
        self.schemaVersion = schemaVersion
        self.requestId = requestId
        self.activityId = activityId
        self.pushToStartKey = pushToStartKey
        self.bundleId = bundleId
        self.attributesType = attributesType
        self.result = result
        self.apns = apns
        self.priorityUsed = priorityUsed
        self.attempts = attempts
        self.latencyMilliseconds = latencyMilliseconds
        self.tokenFingerprint = tokenFingerprint
        self.supersededBy = supersededBy
        self.detail = detail
        self.completedAt = completedAt
        self.channelId = channelId
        self.contentSequence = contentSequence
        self.announcementId = announcementId
        self.deviceId = deviceId
        self.apnsTimestamp = apnsTimestamp
    }

    /// The request's key: the activity of its app (`<bundleId>/<activityId>`; the bare activity id
    /// for an outcome written before outcomes named their app; a device's copy's
    /// `<bundleId>/<activityId>/<deviceId>`), or the push-to-start key.
    public var key: String? {
        guard let activityId else { return pushToStartKey ?? widgetKey }
        guard let bundleId else { return MessageKey.activity(activityId) }
        if let deviceId { return MessageKey.device(bundleId: bundleId, activityId: activityId, deviceId: deviceId) }
        return MessageKey.activity(bundleId: bundleId, activityId: activityId)
    }

    public func validate() throws(MessageValidationError) {
        try result.requireKnown(field: "result")
        try requireExactlyOneTarget(activityId: activityId, pushToStartKey: pushToStartKey, widgetKey: widgetKey)
        if let deviceId {
            // A device's verdict must name its activity and app: without them it would read as the activity's own.
            guard activityId != nil, bundleId != nil, !deviceId.isEmpty else {
                throw MessageValidationError(field: "deviceId", problem: "needs activityId and bundleId, and must not be empty")
            }
            try MessageKey.requireDeviceId(deviceId)
        }
        if let startActivityId {
            guard result == .startUnconfirmed, pushToStartKey != nil, bundleId != nil, !startActivityId.isEmpty else {
                throw MessageValidationError(field: "startActivityId", problem: "only on a startUnconfirmed of a push-to-start key, with its bundleId")
            }
        }
        guard attempts >= 0 else {
            throw MessageValidationError(field: "attempts", problem: "must not be negative (is \(attempts))")
        }
    }
}
