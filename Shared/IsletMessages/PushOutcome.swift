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

        public init(status: Int, reason: String? = nil, apnsId: String? = nil, timestamp: Date? = nil) {
            self.status = status
            self.reason = reason
            self.apnsId = apnsId
            self.timestamp = timestamp
        }
    }

    public var schemaVersion: Int
    /// The ``PushRequest/requestId`` this is the outcome of.
    public var requestId: String
    /// The request's activity. Exactly one of `activityId` and `pushToStartKey` is set.
    public var activityId: String?
    /// The request's push-to-start key. Exactly one of `activityId` and `pushToStartKey` is set.
    public var pushToStartKey: String?
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
    /// for every phone subscribed to it.
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

    public init(
        requestId: String, activityId: String? = nil, pushToStartKey: String? = nil, result: PushResult,
        apns: APNsResponse? = nil, priorityUsed: Int? = nil, attempts: Int, latencyMilliseconds: Double? = nil,
        tokenFingerprint: String? = nil, supersededBy: String? = nil, detail: String? = nil, completedAt: Date,
        bundleId: String? = nil, attributesType: String? = nil, channelId: String? = nil, contentSequence: Int64? = nil,
        announcementId: String? = nil, schemaVersion: Int = Self.currentSchemaVersion
    ) {
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
    }

    /// The request's key: the activity of its app (`<bundleId>/<activityId>`; the bare activity id
    /// for an outcome written before outcomes named their app), or the push-to-start key.
    public var key: String? {
        guard let activityId else { return pushToStartKey }
        return bundleId.map { MessageKey.activity(bundleId: $0, activityId: activityId) } ?? MessageKey.activity(activityId)
    }

    public func validate() throws(MessageValidationError) {
        try result.requireKnown(field: "result")
        try requireExactlyOneTarget(activityId: activityId, pushToStartKey: pushToStartKey)
        guard attempts >= 0 else {
            throw MessageValidationError(field: "attempts", problem: "must not be negative (is \(attempts))")
        }
    }
}

/// What happened to a push request in the end.
public struct PushResult: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// APNs accepted it (200) at the requested priority.
    public static let delivered = PushResult(rawValue: "delivered")
    /// APNs accepted it, but at priority 5 instead of 10: the activity's budget was spent.
    public static let deliveredDowngraded = PushResult(rawValue: "deliveredDowngraded")
    /// Not sent: a newer update of the same activity replaced it (`supersededBy`), or an `end` cancelled it.
    public static let coalesced = PushResult(rawValue: "coalesced")
    /// APNs rejected the token (410, `BadDeviceToken`, `DeviceTokenNotForTopic`; token-registry
    /// invalidates it), or the activity's token was invalidated or refused before it was sent.
    public static let tokenInvalid = PushResult(rawValue: "tokenInvalid")
    /// Not sent: no token was ever registered for its activity while it waited (the dispatcher's
    /// token wait, or until its `expiration`). Nothing says the activity is gone: its next content
    /// is sent once the app registers the token.
    public static let awaitingToken = PushResult(rawValue: "awaitingToken")
    /// APNs rejected the request itself (400/403/413 other than for the token): retrying cannot help.
    public static let rejected = PushResult(rawValue: "rejected")
    /// Not delivered before its `expiration` (or before it was pointless, e.g. the activity ended).
    public static let expired = PushResult(rawValue: "expired")
    /// Gave up after retries (5xx, 429, connection errors); or a push-to-start whose answer is
    /// unknown (a timeout, a lost connection, a crash of the dispatcher): it is not sent again, so
    /// that it can never start two activities.
    public static let failed = PushResult(rawValue: "failed")
    /// **Not final.** An attempt that may reach the phone, or may have: a push-to-start about to be
    /// sent (the dispatcher writes this record, and waits for Kafka's acknowledgement, before each
    /// send of one), or an update or end whose attempt went unanswered (a timeout, a lost
    /// connection) and that waits for its retry. The partition's next dispatcher gives a
    /// push-to-start with this record and no final outcome `failed` rather than a second send (it
    /// could start a second activity), and sends an update or end again without its alert.
    public static let sending = PushResult(rawValue: "sending")
    /// **Not final.** A push-to-start APNs certainly did not take (429, 5xx, a GOAWAY before it was
    /// processed, …) waits for its retry: the ``sending`` before it did not reach the phone. The
    /// partition's next dispatcher may send it (once). Written, and acknowledged, before the retry
    /// can be handed to another dispatcher.
    public static let retrying = PushResult(rawValue: "retrying")

    /// Every result but ``sending`` and ``retrying`` ends the request: each request gets exactly one of them.
    public var isFinal: Bool { self != .sending && self != .retrying }

    public static let knownValues: [PushResult] = [
        .delivered, .deliveredDowngraded, .coalesced, .tokenInvalid, .awaitingToken, .rejected, .expired, .failed, .sending, .retrying,
    ]
}
