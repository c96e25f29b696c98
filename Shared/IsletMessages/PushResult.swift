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

    /// **Not final: a later verdict**, written by content-service (not the dispatcher) about a
    /// push-to-start that APNs accepted (`delivered`): no update token of the activity it was to
    /// start came from the app within the start's confirmation time (60 s by default). Since
    /// iOS 27, a push-to-start token can go stale without APNs saying so (APNs answers 200 and no
    /// activity appears). token-registry invalidates the push-to-start token it went to
    /// (`startUnconfirmed`) until the app registers it again, so nothing starts on it twice.
    /// Added in schema version 1 (additive): a reader that validates `result` must know it.
    public static let startUnconfirmed = PushResult(rawValue: "startUnconfirmed")

    /// Every result but ``sending``, ``retrying`` and ``startUnconfirmed`` ends the request: each
    /// request gets exactly one of them.
    public var isFinal: Bool { self != .sending && self != .retrying && self != .startUnconfirmed }

    public static let knownValues: [PushResult] = [
        .delivered, .deliveredDowngraded, .coalesced, .tokenInvalid, .awaitingToken, .rejected, .expired, .failed, .sending, .retrying,
        .startUnconfirmed,
    ]
}
