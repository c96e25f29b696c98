/// A Kafka topic of Islet: its name, key rule and retention. docs/topics.md is the same table
/// for other teams; a test keeps them in step.
public struct IsletTopic: Hashable, Sendable, CustomStringConvertible {
    public enum CleanupPolicy: String, Sendable {
        /// Records expire after the retention period.
        case delete
        /// The latest record per key is kept for ever; a `null` value (tombstone) deletes the key.
        case compact
    }

    /// The topic's name, e.g. `islet.tokens.v1`. The suffix is the major version of its schema.
    public let name: String
    /// How the record key is formed, in words.
    public let keyRule: String
    public let cleanupPolicy: CleanupPolicy
    /// How long records are kept (`nil` for compacted topics: the latest per key stays).
    public let retention: Duration?
    /// Whether this topic shares its partitioning with the other activity topics (same key, same
    /// partition count), so that one instance owns all of an activity's traffic.
    public let coPartitioned: Bool

    public var description: String { name }

    /// The topic-level configuration to create it with.
    public var configs: [String: String] {
        var configs = ["cleanup.policy": cleanupPolicy.rawValue]
        if let retention {
            configs["retention.ms"] = String(retention.components.seconds * 1_000)
        }
        return configs
    }
}

/// Every topic of Islet. Each has exactly one writing service.
public enum IsletTopics {
    private static let day = Duration.seconds(86_400)

    /// Push tokens and their state; written by token-registry. Compacted: the latest record per key is the token's state.
    public static let tokens = IsletTopic(
        name: "islet.tokens.v1", keyRule: "activityId for update tokens; the push-to-start key for push-to-start tokens",
        cleanupPolicy: .compact, retention: nil, coPartitioned: true)
    /// Domain events from backends; written by backends (or content-service's gRPC API).
    public static let activityEvents = IsletTopic(
        name: "islet.activity-events.v1", keyRule: "activityId", cleanupPolicy: .delete, retention: day * 7, coPartitioned: true)
    /// Complete APNs requests; written by content-service.
    public static let pushRequests = IsletTopic(
        name: "islet.push-requests.v1", keyRule: "activityId; the push-to-start key for push-to-start requests",
        cleanupPolicy: .delete, retention: day * 3, coPartitioned: true)
    /// One final outcome per push request; written by apns-dispatcher.
    public static let pushOutcomes = IsletTopic(
        name: "islet.push-outcomes.v1", keyRule: "the request's key (activityId or push-to-start key)",
        cleanupPolicy: .delete, retention: day * 7, coPartitioned: true)
    /// Verified widget taps; written by analytics-ingest.
    public static let clicks = IsletTopic(
        name: "islet.clicks.v1", keyRule: "activityId", cleanupPolicy: .delete, retention: day * 28, coPartitioned: false)
    /// Taps that failed verification, with the reason; written by analytics-ingest.
    public static let clicksRejected = IsletTopic(
        name: "islet.clicks-rejected.v1", keyRule: "none (null key)", cleanupPolicy: .delete, retention: day * 7, coPartitioned: false)
    /// Records a consumer could not decode or process, with the reason and their origin; written by every consumer.
    public static let deadLetters = IsletTopic(
        name: "islet.dlq.v1", keyRule: "the original record's key", cleanupPolicy: .delete, retention: day * 28, coPartitioned: false)

    public static let all: [IsletTopic] = [tokens, activityEvents, pushRequests, pushOutcomes, clicks, clicksRejected, deadLetters]

    /// The topic with this name, if it is one of Islet's.
    public static func named(_ name: String) -> IsletTopic? {
        all.first { $0.name == name }
    }
}

/// Record keys, formed in one place.
public enum MessageKey {
    /// Everything about one activity is keyed by its id.
    public static func activity(_ activityId: String) -> String { activityId }

    /// Push-to-start traffic of one app, device and attributes type: `pts:<bundleId>:<deviceId>:<attributesType>`.
    /// Activity ids never contain `:`, so the two kinds of key never collide.
    public static func pushToStart(bundleId: String, deviceId: String, attributesType: String) -> String {
        "pts:\(bundleId):\(deviceId):\(attributesType)"
    }
}
