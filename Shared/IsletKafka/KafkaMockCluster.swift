/// librdkafka's in-process mock Kafka cluster, for fault tests: brokers go down and up, requests
/// fail with chosen errors, round trips slow down. Clients connect with ``bootstrapServers``.
public final class KafkaMockCluster: Sendable {
    /// Kafka protocol API keys whose requests can be made to fail.
    public struct APIKey: Sendable, Hashable {
        public let rawValue: Int16
        public static let produce = APIKey(rawValue: 0)
        public static let fetch = APIKey(rawValue: 1)
        public static let offsetCommit = APIKey(rawValue: 8)
        public static let initProducerId = APIKey(rawValue: 22)
    }

    /// Kafka protocol error codes to inject.
    public struct ErrorCode: Sendable, Hashable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let notLeaderForPartition = ErrorCode(rawValue: 6)
        public static let requestTimedOut = ErrorCode(rawValue: 7)
        public static let networkException = ErrorCode(rawValue: 13)
        public static let notEnoughReplicas = ErrorCode(rawValue: 19)
        public static let notEnoughReplicasAfterAppend = ErrorCode(rawValue: 20)
        public static let leaderNotAvailable = ErrorCode(rawValue: 5)
        /// The idempotent producer's sequence numbers do not match the broker's.
        public static let outOfOrderSequenceNumber = ErrorCode(rawValue: 45)
        public static let invalidProducerEpoch = ErrorCode(rawValue: 47)
        /// The broker no longer knows the producer id (its state expired or was lost).
        public static let unknownProducerId = ErrorCode(rawValue: 59)
        /// A newer producer with the same identity exists: this one is fenced.
        public static let producerFenced = ErrorCode(rawValue: 90)
        /// librdkafka's name for the code.
        public var description: String { RDKafkaMockClusterHandle.errorName(rawValue) }
    }

    private let handle: RDKafkaMockClusterHandle

    /// Starts a cluster of `brokers` brokers (ids 1...brokers).
    public init(brokers: Int = 3) throws(KafkaError) {
        handle = try RDKafkaMockClusterHandle(brokers: Int32(brokers))
    }

    public var bootstrapServers: String { handle.bootstrapServers }

    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        try handle.createTopic(name, partitions: Int32(partitions), replicationFactor: Int32(replicationFactor))
    }

    /// Takes a broker down (connections closed, new ones refused) or brings it back.
    public func setBroker(_ id: Int, up: Bool) {
        handle.setBroker(Int32(id), up: up)
    }

    public func setBrokerRoundTripTime(_ id: Int, _ duration: Duration) {
        handle.setBrokerRoundTripTime(Int32(id), milliseconds: duration.librdkafkaMilliseconds)
    }

    public func setPartitionLeader(topic: String, partition: Int, broker: Int) {
        handle.setPartitionLeader(topic: topic, partition: Int32(partition), broker: Int32(broker))
    }

    /// The next requests of this kind fail with these errors, one each, in order.
    public func injectErrors(_ errors: [ErrorCode], into apiKey: APIKey) {
        handle.pushRequestErrors(apiKey: apiKey.rawValue, errors: errors.map(\.rawValue))
    }
}
