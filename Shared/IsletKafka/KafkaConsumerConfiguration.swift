import Foundation

/// Configuration of a ``KafkaConsumer``: a consumer-group member, or a replica that reads every
/// partition.
///
/// At-least-once is built in for group members: librdkafka stores an offset only when the caller
/// marks a message processed (`enable.auto.offset.store=false`, enforced) and commits stored
/// offsets itself (`enable.auto.commit=true`, enforced), synchronously when partitions are revoked.
public struct KafkaConsumerConfiguration: Sendable {
    /// Where a group without a committed offset starts reading.
    public enum OffsetReset: String, Sendable {
        case earliest, latest
    }

    /// How the consumer gets its partitions.
    public enum Membership: Sendable, Hashable {
        /// A member of ``KafkaConsumerConfiguration/groupID``: the group shares the partitions,
        /// and offsets marked processed are committed.
        case group
        /// No group: every partition of the topics (as they are when ``KafkaConsumer/run()``
        /// starts) from its first offset, nothing committed, and a
        /// ``KafkaConsumerEvent/partitionEnd(_:)`` each time a partition's end is reached. For
        /// state every instance keeps whole (a table built from a compacted topic).
        case replica
    }

    /// `bootstrap.servers`: comma-separated `host:port` list.
    public var bootstrapServers: String
    /// `group.id`: members of one group share the topics' partitions.
    public var groupID: String
    /// The topics to subscribe to.
    public var topics: [String]
    /// `client.id`. Default `islet`.
    public var clientID: String
    /// `auto.offset.reset`. Default ``OffsetReset/earliest``: a new group reads everything.
    public var offsetReset: OffsetReset
    /// At most this many records are taken from librdkafka in one call. Default 1,000.
    public var batchSize: Int
    /// At most this many records wait between librdkafka and the caller's loop; the poll thread
    /// waits when it is full. Default 4,096.
    public var bufferCapacity: Int
    /// How long the poll thread waits in librdkafka when nothing arrives (it returns at once when
    /// a record does). Bounds how long shutdown waits for the thread. Default 100 ms.
    public var pollTimeout: Duration = .milliseconds(100)
    /// Any other librdkafka property, by its dotted name. Overrides ``defaultSettings``.
    public var settings: [String: String]
    /// A group member (the default) or a replica of every partition.
    public var membership: Membership
    /// When the consumer counts as out of touch with the cluster (``KafkaConsumer/health``).
    public var health = KafkaHealthPolicy()

    /// What Islet sets unless ``settings`` says otherwise.
    ///
    /// - `fetch.wait.max.ms=10`: a broker may hold a fetch until this wait expires even when
    ///   records arrive (the local broker does), so a large value adds latency to every hop.
    /// - `auto.commit.interval.ms=1000`: at most a second of processed work is redone after a crash.
    /// - `session.timeout.ms=10000`, `heartbeat.interval.ms=1000`: a crashed member's partitions
    ///   move to the others after about 10 s, not librdkafka's default 45 s.
    /// - `enable.partition.eof=false`: the end of a partition is not an event.
    /// - `partition.assignment.strategy=range`, librdkafka's eager protocol: a rebalance revokes
    ///   every partition of every member, and each member finishes its work in flight first
    ///   (``KafkaConsumer/onRevocation(timeout:_:)``). `cooperative-sticky` (only the partitions that
    ///   move are revoked) is supported on Apache Kafka, where it is the better choice; it is not the
    ///   default because the local broker, tansu, loses track of a group rebalancing that way (see
    ///   docs/operations.md). Every member of a group must use the same protocol.
    public static let defaultSettings: [String: String] = [
        "partition.assignment.strategy": "range",
        "fetch.wait.max.ms": "10",
        "auto.commit.interval.ms": "1000",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "1000",
        "enable.partition.eof": "false",
    ]

    static let enforcedSettings: [String: String] = [
        "enable.auto.offset.store": "false",
        "enable.auto.commit": "true",
    ]

    /// Sets `fetch.wait.max.ms` to `wait` unless ``settings`` already names it (an operator's
    /// choice wins). For a consumer off the hot path: every fetch waiting 10 ms is work for the
    /// broker even when nothing arrives.
    public mutating func preferFetchWait(_ wait: Duration) {
        if settings["fetch.wait.max.ms"] == nil { settings["fetch.wait.max.ms"] = "\(Int(wait / .milliseconds(1)))" }
    }

    /// A replica has no group to commit to, and reports partition ends (how it knows it caught up).
    static let enforcedReplicaSettings: [String: String] = [
        "enable.auto.offset.store": "false",
        "enable.auto.commit": "false",
        "enable.partition.eof": "true",
    ]

    /// A replica of `topics`: every partition from its first offset, no group (see ``Membership/replica``).
    /// - Parameters:
    ///   - partitions: only these partitions of the topics (default: all of them).
    ///   - since: start at the first record written at or after this time, instead of the first offset.
    ///   - fetchWait: `fetch.wait.max.ms` unless `settings` names it. A replica that keeps a table
    ///     up to date can lag a little; the default, 100 ms, costs the broker far less than the hot
    ///     path's 10 ms (each waiting fetch is work for it even when nothing arrives). A replica read
    ///     on the hot path (the token table) passes 10 ms.
    public static func replica(
        bootstrapServers: String, topics: [String], partitions: [Int32]? = nil, since: Date? = nil, clientID: String = "islet",
        bufferCapacity: Int = 4_096, fetchWait: Duration = .milliseconds(100), settings: [String: String] = [:]
    ) -> KafkaConsumerConfiguration {
        var configuration = KafkaConsumerConfiguration(
            bootstrapServers: bootstrapServers, groupID: "", topics: topics, clientID: clientID, offsetReset: .earliest,
            bufferCapacity: bufferCapacity, settings: settings)
        configuration.preferFetchWait(fetchWait)
        configuration.membership = .replica
        configuration.replicaPartitions = partitions
        configuration.replicaSince = since
        return configuration
    }

    /// A replica's partitions (`nil`: all).
    public var replicaPartitions: [Int32]?
    /// Where a replica starts: the first record at or after this time (`nil`: the first offset).
    public var replicaSince: Date?
    /// Where a replica starts in particular partitions: partition → offset (the next record to
    /// read). Overrides ``replicaSince`` for the partitions it names; an offset outside what the
    /// partition holds starts at its first record (`auto.offset.reset=earliest`). For tools that
    /// read from a known position (`islet tail --offset`).
    public var replicaStartOffsets: [Int32: Int64]?
    /// Where a replica starts in particular partitions of particular topics: the next offset to
    /// read, but never before ``replicaSince``'s first record. Overrides ``replicaStartOffsets``
    /// for the partitions it names (content-service starts its memory replica at the positions
    /// its changelog's checkpoints name).
    public var replicaStartPositions: [KafkaTopicPartition: Int64]?

    public init(
        bootstrapServers: String,
        groupID: String,
        topics: [String],
        clientID: String = "islet",
        offsetReset: OffsetReset = .earliest,
        batchSize: Int = 1_000,
        bufferCapacity: Int = 4_096,
        settings: [String: String] = [:]
    ) {
        self.bootstrapServers = bootstrapServers
        self.groupID = groupID
        self.topics = topics
        self.clientID = clientID
        self.offsetReset = offsetReset
        self.batchSize = batchSize
        self.bufferCapacity = bufferCapacity
        self.settings = settings
        self.membership = .group
    }

    func librdkafkaProperties() throws(KafkaError) -> [String: String] {
        guard !topics.isEmpty, !topics.contains(where: \.isEmpty) else {
            throw KafkaError(code: .configuration, message: "a consumer needs at least one topic, and no empty topic name")
        }
        if membership == .replica {
            guard groupID.isEmpty, settings["group.id"] == nil else {
                throw KafkaError(code: .configuration, message: "a replica reads every partition itself: it takes no group.id")
            }
        } else {
            guard !groupID.isEmpty else {
                throw KafkaError(code: .configuration, message: "group.id must not be empty")
            }
        }
        guard batchSize > 0, bufferCapacity >= batchSize else {
            throw KafkaError(
                code: .configuration,
                message: "batchSize must be positive and bufferCapacity at least batchSize (got \(batchSize), \(bufferCapacity))")
        }
        // librdkafka's assign() needs a group.id even though a replica never joins a group (joining
        // happens only on subscribe) and never commits.
        let base = [
            "bootstrap.servers": bootstrapServers, "client.id": clientID, "auto.offset.reset": offsetReset.rawValue,
            "group.id": membership == .group ? groupID : "\(clientID).replica",
        ]
        return try mergeProperties(
            defaults: Self.defaultSettings, user: settings,
            enforced: membership == .group ? Self.enforcedSettings : Self.enforcedReplicaSettings, base: base)
    }
}
