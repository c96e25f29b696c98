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
