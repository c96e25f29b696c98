import Foundation
import IsletKafka
import IsletMessages
import Logging
import Testing

@Suite("Dead letters never commit past unfinished work (librdkafka mock cluster)", .timeLimit(.minutes(2)))
struct DeadLetterOrderTests {
    @Test("a bad record behind one still in flight: sent to the dead-letter topic (retried while Kafka refuses), handed to the loop, not committed past the one in flight")
    func notMarkedBeforeEarlierRecords() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("in", partitions: 1)
        // The dead letters go to a second cluster, down at first: the send is retried until it is up.
        let dlqCluster = try KafkaMockCluster(brokers: 1)
        try dlqCluster.createTopic("dlq", partitions: 1)
        dlqCluster.setBroker(1, up: false)

        let setup = try KafkaProducer(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
        let input = Task { try await setup.run() }
        let good = ActivityEvent(
            eventId: "e1", activityId: "a1", kind: .update, attributesType: "DeliveryAttributes", fields: ["status": .string("cooking")],
            urgency: .routine, occurredAt: Date(), sequence: 1, source: "test")
        try await setup.send(good, to: "in")
        try await setup.send(topic: "in", key: "a1", value: Array("{not json".utf8))
        setup.shutdown()
        try await input.value

        var dlqConfiguration = KafkaProducerConfiguration(bootstrapServers: dlqCluster.bootstrapServers, settings: ["message.timeout.ms": "500"])
        dlqConfiguration.health = KafkaHealthPolicy(probeInterval: .milliseconds(200))
        let producer = try KafkaProducer(configuration: dlqConfiguration, logger: logger)
        let consumer = try KafkaConsumer(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, groupID: "dlq-order", topics: ["in"], settings: ["auto.commit.interval.ms": "100"]),
            logger: logger)
        let writer = DeadLetterWriter(producer: producer, consumer: consumer, service: "test", logger: logger, topic: "dlq")
        let partition = KafkaTopicPartition(topic: "in", partition: 0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await consumer.run() }
            group.addTask {
                try await Task.sleep(for: .seconds(3))
                dlqCluster.setBroker(1, up: true)
            }
            let started = ContinuousClock.now
            var first: KafkaMessage?
            for try await event in consumer.decoded(as: ActivityEvent.self, deadLetters: writer) {
                switch event {
                case .message(_, let raw):
                    first = raw  // in flight: not marked yet
                case .deadLettered(let raw):
                    #expect(raw.offset == 1)
                    #expect(ContinuousClock.now - started >= .seconds(2), "handed over only once written, after the dead-letter cluster came back")
                    // Nothing marked: whatever is committed is not past the record in flight.
                    try await Task.sleep(for: .milliseconds(500))
                    let committed = try await consumer.committedOffsets(for: [partition])
                    #expect((committed[partition] ?? nil) == nil, "committed past the record in flight: \(String(describing: committed[partition]))")
                    // The loop finishes the first record, then marks the dead letter, in order.
                    if let first { consumer.markProcessed(first) }
                    consumer.markProcessed(raw)
                    var marked: Int64?
                    for _ in 0..<50 {
                        try await Task.sleep(for: .milliseconds(100))
                        marked = try await consumer.committedOffsets(for: [partition])[partition] ?? nil
                        if marked == 2 { break }
                    }
                    #expect(marked == 2)
                    consumer.shutdown()
                default:
                    continue
                }
            }
            #expect(first?.offset == 0)
            producer.shutdown()
            group.cancelAll()
        }
    }
}
