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
    /// Other topic-level configs it is created with.
    public let otherConfigs: [String: String]

    public init(
        name: String, keyRule: String, cleanupPolicy: CleanupPolicy, retention: Duration?, coPartitioned: Bool, otherConfigs: [String: String] = [:]
    ) {
        self.name = name
        self.keyRule = keyRule
        self.cleanupPolicy = cleanupPolicy
        self.retention = retention
        self.coPartitioned = coPartitioned
        self.otherConfigs = otherConfigs
    }

    public var description: String { name }

    /// The topic-level configuration to create it with.
    public var configs: [String: String] {
        var configs = otherConfigs
        configs["cleanup.policy"] = cleanupPolicy.rawValue
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
        name: "islet.tokens.v1", keyRule: "bundleId/activityId for update tokens; the push-to-start key for push-to-start tokens",
        cleanupPolicy: .compact, retention: nil, coPartitioned: true)
    /// Domain events from backends; written by backends (or content-service's gRPC API).
    public static let activityEvents = IsletTopic(
        name: "islet.activity-events.v1", keyRule: "activityId", cleanupPolicy: .delete, retention: day * 7, coPartitioned: true)
    /// Complete APNs requests; written by content-service.
    public static let pushRequests = IsletTopic(
        name: "islet.push-requests.v1", keyRule: "bundleId/activityId; the push-to-start key for push-to-start requests",
        cleanupPolicy: .delete, retention: day * 3, coPartitioned: true)
    /// One final outcome per push request; written by apns-dispatcher.
    public static let pushOutcomes = IsletTopic(
        name: "islet.push-outcomes.v1", keyRule: "the request's key (bundleId/activityId or push-to-start key)",
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
        name: "islet.dispatch-budgets.v1", keyRule: "bundleId/activityId for an activity's budget; bundleId:deviceId for a device's push-to-start budget",
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

/// Record keys, formed in one place.
///
/// Activity ids are chosen by backends, so two apps may use the same one (`order-42`): Islet keeps
/// an activity's state under its app and id together, ``activity(bundleId:activityId:)``. Records
/// are partitioned by the activity id alone (``partitionKeyStart(of:)``), so that everything about an
/// id lands in one partition of every co-partitioned topic however its key is spelled.
public enum MessageKey {
    /// An activity of one app: `<bundleId>/<activityId>`. Bundle ids never contain `/`, so the
    /// first `/` ends the app.
    public static func activity(bundleId: String, activityId: String) -> String { "\(bundleId)/\(activityId)" }

    /// The key a backend gives an activity's events: the activity id alone (the event names its app
    /// in its value).
    public static func activity(_ activityId: String) -> String { activityId }

    /// Where the bytes of `key` that choose its partition start: for an activity of an app
    /// (`<bundleId>/<activityId>`) after the `/`, so that it lands where a backend's event keyed by
    /// the bare activity id does; for every other key (an activity id, which never holds `/`; a
    /// push-to-start key, whose first `:` comes before any `/`), at 0: the whole key.
    public static func partitionKeyStart<Key: Collection<UInt8>>(of key: Key) -> Int {
        var offset = 0
        for byte in key {
            if byte == UInt8(ascii: ":") { return 0 }
            if byte == UInt8(ascii: "/") { return offset + 1 }
            offset += 1
        }
        return 0
    }

    /// An activity id as keys need it: neither `:` (push-to-start keys) nor `/` (an app's activity).
    public static func requireActivityId(_ activityId: String, field: String = "activityId") throws(MessageValidationError) {
        for character in [":", "/"] where activityId.contains(character) {
            throw MessageValidationError(field: field, problem: "must not contain '\(character)' (keys use it as a separator)")
        }
    }

    /// A bundle id: two or more dot-separated parts of ASCII letters, digits and `-`, at most 155 characters.
    public static func requireBundleId(_ bundleId: String, field: String = "app.bundleId") throws(MessageValidationError) {
        let parts = bundleId.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let valid = bundleId.utf8.count <= 155 && parts.count >= 2
            && parts.allSatisfy { part in
                !part.isEmpty && part.allSatisfy { byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                }
            }
        guard valid else {
            throw MessageValidationError(field: field, problem: "must be a bundle identifier like com.example.app (at most 155 characters)")
        }
    }

    /// Push-to-start traffic of one app, device and attributes type: `pts:<bundleId>:<deviceId>:<attributesType>`.
    /// Activity ids never contain `:`, so the two kinds of key never collide.
    public static func pushToStart(bundleId: String, deviceId: String, attributesType: String) -> String {
        "pts:\(bundleId):\(deviceId):\(attributesType)"
    }
}
