import IsletKafka
import IsletMessages
import IsletTokens

/// Where the registry persists its changes: `islet.tokens.v1`. A change counts only once this
/// returns (the record is acknowledged by Kafka).
public protocol TokenRecordPublisher: Sendable {
    /// Persists `record` under its key; returns where it landed (`nil` if the broker did not say).
    /// Throws when the record was not acknowledged.
    func publish(_ record: TokenRecord) async throws -> TokenTable.Position?
    /// Deletes `key` from the compacted topic (a record without a value); throws when it was not acknowledged.
    func tombstone(key: String) async throws -> TokenTable.Position?
}

/// Publishes to Kafka. How long a record may wait for its acknowledgement is the producer's
/// `message.timeout.ms`, which the service sets from ``RegistrySettings/sendTimeout``: past it,
/// librdkafka gives up on the record and the caller gets an error, not an open-ended wait.
public struct KafkaTokenPublisher: TokenRecordPublisher {
    public let producer: KafkaProducer
    public let topic: String

    public init(producer: KafkaProducer, topic: String = IsletTopics.tokens.name) {
        self.producer = producer
        self.topic = topic
    }

    public func publish(_ record: TokenRecord) async throws -> TokenTable.Position? {
        let report = try await producer.send(record, to: topic)
        return report.position
    }

    public func tombstone(key: String) async throws -> TokenTable.Position? {
        let report = try await producer.send(topic: topic, key: key, value: nil)
        return report.position
    }
}
