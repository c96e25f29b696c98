import Foundation
import IsletKafka
import Synchronization
import Testing

@Suite("Producer and consumer against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(3)))
struct ProducerConsumerTests {
    @Test("a record sent is read back with its key, value and headers")
    func roundTrip() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("roundtrip")
        try await createTopic(servers, topic, partitions: 3)

        let report = try await withProducer(try makeProducer(servers)) { producer in
            try await producer.send(
                topic: topic, key: "order-42", value: Array(#"{"hello":"world"}"#.utf8),
                headers: [KafkaHeader(name: "trace", string: "abc"), KafkaHeader(name: "empty", value: nil)])
        }
        #expect(report.topic == topic)
        #expect(report.offset == 0)

        let consumer = try makeConsumer(servers, group: uniqueName("g"), topics: [topic])
        let message = try await withRunning([consumer], "reading the record") { () -> KafkaMessage? in
            for await message in consumer.messages {
                consumer.markProcessed(message)
                return message
            }
            return nil
        }
        let received = try #require(message)
        #expect(received.keyString == "order-42")
        #expect(received.value == Array(#"{"hello":"world"}"#.utf8))
        #expect(received.partition == report.partition)
        #expect(received.header("trace")?.value == Array("abc".utf8))
        #expect(received.header("empty") != nil)
        #expect(received.header("empty")?.value == nil)
        #expect(received.timestampMilliseconds != nil)
    }

    @Test("10,000 records sent, then a shutdown: all 10,000 are on the topic, where their delivery reports said")
    func tenThousandThenShutdown() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("tenk")
        try await createTopic(servers, topic, partitions: 4)
        let producer = try makeProducer(servers)
        // Every send awaits its own delivery report; the shutdown comes right after the last one.
        let reports = try await withProducer(producer) { producer in
            try await withThrowingTaskGroup(of: (String, KafkaDeliveryReport).self) { senders in
                for i in 0..<10_000 {
                    senders.addTask {
                        let value = "message \(i)"
                        return (value, try await producer.send(topic: topic, key: "k\(i % 97)", value: Array(value.utf8)))
                    }
                }
                var reports: [String: KafkaDeliveryReport] = [:]
                for try await (value, report) in senders { reports[value] = report }
                return reports
            }
        }
        #expect(reports.count == 10_000)

        // Read everything back: each record exactly once, at the partition and offset it was acknowledged with.
        let consumer = try makeConsumer(servers, group: uniqueName("g"), topics: [topic])
        let read = try await withRunning([consumer], "reading 10,000 records") {
            var read: [String: [KafkaDeliveryReport]] = [:]
            var count = 0
            for await message in consumer.messages {
                read[String(decoding: message.value ?? [], as: UTF8.self), default: []]
                    .append(KafkaDeliveryReport(topic: message.topic, partition: message.partition, offset: message.offset))
                count += 1
                if count == 10_000 { break }
            }
            return read
        }
        let readOnce = read.compactMapValues { $0.count == 1 ? $0[0] : nil }
        #expect(readOnce.count == 10_000)
        #expect(readOnce == reports)
    }

    @Test("senders wait for queue space and all complete when librdkafka's queue is tiny")
    func queueFullSendersComplete() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("queuefull")
        try await createTopic(servers, topic, partitions: 2)
        // Five records fit in librdkafka's queue; 2,000 senders keep it full for the whole run.
        let producer = try makeProducer(servers, settings: ["queue.buffering.max.messages": "5"])
        let delivered = try await withProducer(producer) { producer in
            try await withThrowingTaskGroup(of: Int.self) { senders in
                for i in 0..<2_000 {
                    senders.addTask {
                        try await producer.send(topic: topic, key: "k\(i)", value: Array("v\(i)".utf8))
                        return 1
                    }
                }
                return try await senders.reduce(0, +)
            }
        }
        #expect(delivered == 2_000)
    }
}
