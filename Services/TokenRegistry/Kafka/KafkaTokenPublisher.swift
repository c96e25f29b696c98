import IsletKafka
import IsletMessages
import IsletTokens

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
