/// Every topic of Islet. Each has exactly one writing service.
public enum IsletTopics {
    private static let day = Duration.seconds(86_400)

    /// Push tokens and their state; written by token-registry. Compacted: the latest record per key is the token's state.
    public static let tokens = IsletTopic(
        name: "islet.tokens.v1", keyRule: "bundleId/activityId for update tokens (bundleId/activityId/deviceId for an activity's further devices); the push-to-start key for push-to-start tokens",
        cleanupPolicy: .compact, retention: nil, coPartitioned: true)
    /// Domain events from backends; written by backends (or content-service's gRPC API).
    public static let activityEvents = IsletTopic(
        name: "islet.activity-events.v1", keyRule: "activityId", cleanupPolicy: .delete, retention: day * 7, coPartitioned: true)
    /// Complete APNs requests; written by content-service.
    public static let pushRequests = IsletTopic(
        name: "islet.push-requests.v1", keyRule: "bundleId/activityId (bundleId/activityId/deviceId for a copy to one more device); the push-to-start key for push-to-start requests",
        cleanupPolicy: .delete, retention: day * 3, coPartitioned: true)
    /// One final outcome per push request; written by apns-dispatcher.
    public static let pushOutcomes = IsletTopic(
        name: "islet.push-outcomes.v1", keyRule: "the request's key (bundleId/activityId, bundleId/activityId/deviceId or push-to-start key)",
        cleanupPolicy: .delete, retention: day * 7, coPartitioned: true)
    /// What content-service remembers of each activity (``ContentMemoryRecord``), and per partition
    /// how far the records behind it were read; written and read by content-service only. Compacted:
    /// the latest record per key is the activity's memory; a restart or a partition's new owner
    /// restores from it in time proportional to the activities, not to hours of requests.
    public static let contentMemory = IsletTopic(
        name: "islet.content-memory.v1", keyRule: "bundleId/activityId for an activity's memory; `checkpoint` for a partition's checkpoint",
        cleanupPolicy: .compact, retention: nil, coPartitioned: true,
        // Compacted within the hour (the default segment, a week, would leave a week of writes
        // uncompacted for a restart to read), as soon as a tenth of a segment is superseded.
        otherConfigs: ["segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.1"])
    /// What is left of each activity's (and push-to-start device's) APNs budget
    /// (``DispatchBudgetRecord``); written and read by apns-dispatcher only. Compacted: the latest
    /// record per key is the budget; a partition's new owner reads its partition when it is
    /// assigned and goes on with the same budgets.
    public static let dispatchBudgets = IsletTopic(
        name: "islet.dispatch-budgets.v1", keyRule: "bundleId/activityId for an activity's budget (bundleId/activityId/deviceId on one more device); bundleId:deviceId for a device's push-to-start budget",
        cleanupPolicy: .compact, retention: nil, coPartitioned: true,
        otherConfigs: ["segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.1"])
    /// The broadcast channel (iOS 18) of each activity sent by broadcast (``BroadcastChannelRecord``);
    /// written by apns-dispatcher, read by it when a partition is assigned (and by whoever looks a
    /// channel id up). Compacted: the latest record per key is the channel.
    public static let broadcastChannels = IsletTopic(
        name: "islet.broadcast-channels.v1", keyRule: "bundleId/activityId", cleanupPolicy: .compact, retention: nil, coPartitioned: true)
    /// Verified widget taps; written by analytics-ingest.
    public static let clicks = IsletTopic(
        name: "islet.clicks.v1", keyRule: "activityId", cleanupPolicy: .delete, retention: day * 28, coPartitioned: false)
    /// Taps that failed verification, with the reason; written by analytics-ingest.
    public static let clicksRejected = IsletTopic(
        name: "islet.clicks-rejected.v1", keyRule: "none (null key)", cleanupPolicy: .delete, retention: day * 7, coPartitioned: false)
    /// Records a consumer could not decode or process, with the reason and their origin; written by every consumer.
    public static let deadLetters = IsletTopic(
        name: "islet.dlq.v1", keyRule: "the original record's key", cleanupPolicy: .delete, retention: day * 28, coPartitioned: false)

    public static let all: [IsletTopic] = [
        tokens, activityEvents, pushRequests, pushOutcomes, contentMemory, dispatchBudgets, broadcastChannels, clicks, clicksRejected, deadLetters,
    ]

    /// The topic with this name, if it is one of Islet's.
    public static func named(_ name: String) -> IsletTopic? {
        all.first { $0.name == name }
    }
}
