import IsletKafka
import IsletMessages

/// Publishes to Kafka: clicks on `islet.clicks.v1` under the activity id, rejected taps on
/// `islet.clicks-rejected.v1` without a key. How long a record may wait for its acknowledgement
/// is ``IngestSettings/sendTimeout``: the producer's `message.timeout.ms` and its
/// ``KafkaProducerConfiguration/sendTimeout`` (the second ends the wait on time; librdkafka's
/// timeout of a record already sent to a broker that stopped answering comes a second or more late).
public struct KafkaTapPublisher: TapPublisher {
    public let producer: KafkaProducer
    public let clicksTopic: String
    public let rejectedTopic: String

    public init(producer: KafkaProducer, clicksTopic: String = IsletTopics.clicks.name, rejectedTopic: String = IsletTopics.clicksRejected.name) {
        self.producer = producer
        self.clicksTopic = clicksTopic
        self.rejectedTopic = rejectedTopic
    }

    public func publish(_ records: [TapRecord]) async -> [(any Error)?] {
        if records.count == 1 { return [await send(records[0])] }
        return await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (index, record) in records.enumerated() {
                group.addTask {
                    let error = await send(record)
                    return (index, error)
                }
            }
            var results = [(any Error)?](repeating: nil, count: records.count)
            for await (index, error) in group { results[index] = error }
            return results
        }
    }

    private func send(_ record: TapRecord) async -> (any Error)? {
        do {
            switch record {
            case .click(let click): try await producer.send(click, to: clicksTopic)
            case .rejected(let rejected): try await producer.send(rejected, to: rejectedTopic)
            }
            return nil
        } catch {
            return error
        }
    }
}
