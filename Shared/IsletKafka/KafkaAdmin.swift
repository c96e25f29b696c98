import IsletMessages
import Logging

/// Topic administration: create topics idempotently, read partition counts and watermarks.
///
/// Every request runs on a thread of its own (librdkafka's admin calls block).
public final class KafkaAdmin: Sendable {
    /// A topic to create.
    public struct TopicSpec: Sendable, Hashable {
        public var name: String
        public var partitions: Int
        public var replicationFactor: Int
        /// Topic-level configs by their Kafka names (`cleanup.policy`, `retention.ms`, …).
        public var configs: [String: String]

        public init(name: String, partitions: Int, replicationFactor: Int = 1, configs: [String: String] = [:]) {
            self.name = name
            self.partitions = partitions
            self.replicationFactor = replicationFactor
            self.configs = configs
        }

        /// One of Islet's topics, with its cleanup policy and retention.
        public init(_ topic: IsletTopic, partitions: Int, replicationFactor: Int = 1) {
            self.init(name: topic.name, partitions: partitions, replicationFactor: replicationFactor, configs: topic.configs)
        }
    }

    /// What creating a topic did.
    public enum TopicCreation: Sendable, Hashable {
        case created
        /// The topic was there already (creating is idempotent); its configs were left as they are.
        case alreadyExisted(partitions: Int?)
    }

    private let client: RDKafkaClient
    private let timeout: Duration

    public init(configuration: KafkaAdminConfiguration, logger: Logger) throws(KafkaError) {
        self.timeout = configuration.requestTimeout
        self.client = try RDKafkaClient(
            kind: .producer, properties: try configuration.librdkafkaProperties(),
            callbacks: RDKafkaCallbacks(logger: logger, onDelivery: nil, onError: { error in
                logger.debug("admin client error", metadata: ["kafka.error": "\(error)"])
            }))
    }

    /// Creates the topics that do not exist yet; existing ones are reported, not changed.
    public func createTopics(_ specs: [TopicSpec]) async throws -> [String: TopicCreation] {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        let newTopics = specs.map {
            RDKafkaNewTopic(name: $0.name, partitions: Int32($0.partitions), replicationFactor: Int32($0.replicationFactor), configs: $0.configs)
        }
        return try await DedicatedThread.run(name: "islet-kafka-admin") {
            defer { client.poll(timeoutMilliseconds: 0) }
            var outcome: [String: TopicCreation] = [:]
            for result in try client.createTopics(newTopics, timeoutMilliseconds: timeoutMilliseconds) {
                if let error = result.error { throw error }
                outcome[result.name] =
                    result.alreadyExists
                    ? .alreadyExisted(partitions: try client.partitionCount(topic: result.name, timeoutMilliseconds: timeoutMilliseconds))
                    : .created
            }
            return outcome
        }
    }

    /// Creates all of Islet's topics (``IsletTopics/all``). The co-partitioned ones must end up
    /// with the same partition count, or this throws: one instance must own all of an activity.
    @discardableResult
    public func createIsletTopics(partitions: Int, replicationFactor: Int = 1) async throws -> [String: TopicCreation] {
        let outcome = try await createTopics(IsletTopics.all.map { TopicSpec($0, partitions: partitions, replicationFactor: replicationFactor) })
        var counts: [String: Int] = [:]
        for topic in IsletTopics.all where topic.coPartitioned {
            counts[topic.name] = try await partitionCount(of: topic.name)
        }
        if Set(counts.values).count > 1 {
            throw KafkaError(
                code: .admin,
                message: "co-partitioned topics have different partition counts: \(counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", "))")
        }
        return outcome
    }

    /// The partition count of a topic, `nil` if it does not exist.
    public func partitionCount(of topic: String) async throws -> Int? {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        return try await DedicatedThread.run(name: "islet-kafka-admin") {
            try client.partitionCount(topic: topic, timeoutMilliseconds: timeoutMilliseconds)
        }
    }

    /// The topic's configuration as the broker reports it (`cleanup.policy`, `retention.ms`, …).
    public func configs(of topic: String) async throws -> [String: String] {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        return try await DedicatedThread.run(name: "islet-kafka-admin") {
            try client.topicConfigs(topic: topic, timeoutMilliseconds: timeoutMilliseconds)
        }
    }

    /// The first offset and the next offset to be written of a partition.
    public func watermarks(topic: String, partition: Int32) async throws -> (low: Int64, high: Int64) {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        let marks = try await DedicatedThread.run(name: "islet-kafka-admin") {
            let (low, high) = try client.watermarks(topic: topic, partition: partition, timeoutMilliseconds: timeoutMilliseconds)
            return [low, high]
        }
        return (marks[0], marks[1])
    }
}
