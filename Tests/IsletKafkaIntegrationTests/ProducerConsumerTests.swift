import Foundation
import IsletKafka
import IsletTesting
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

    @Test("records are partitioned by activity id: an app's activity (com.example.food/order-7) lands with the bare id, where the Java client's murmur2 puts it")
    func partitionedByActivity() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("partitions")
        let partitions = 8
        try await createTopic(servers, topic, partitions: partitions)
        let ids = (0..<24).map { "order-\($0)" }
        let reports = try await withProducer(try makeProducer(servers)) { producer in
            var reports: [String: Int32] = [:]
            for id in ids {
                for key in [id, "com.example.food/\(id)", "com.example.ride/\(id)", "com.example.food/\(id)/ipad-7"] {
                    reports[key] = try await producer.send(topic: topic, key: key, value: [1]).partition
                }
            }
            for key in ["pts:com.example.ride:device-1:RideAttributes", "pts:com.example.ride:device-2:RideAttributes"] {
                reports[key] = try await producer.send(topic: topic, key: key, value: [1]).partition
            }
            return reports
        }
        for id in ids {
            let expected = javaPartition(Array(id.utf8), partitions: partitions)
            #expect(reports[id] == expected, "\(id): the Java client's partition")
            #expect(reports["com.example.food/\(id)"] == expected && reports["com.example.ride/\(id)"] == expected, "\(id) in either app")
            #expect(reports["com.example.food/\(id)/ipad-7"] == expected, "\(id): one device's token lands with its activity")
        }
        #expect(Set(ids.map { reports[$0]! }).count > 1, "the ids spread over partitions")
        for (key, partition) in reports {
            #expect(KafkaPartitioner.partition(ofKey: key, partitions: Int32(partitions)) == partition, "\(key): computed where it was put")
        }
        for key in ["pts:com.example.ride:device-1:RideAttributes", "pts:com.example.ride:device-2:RideAttributes"] {
            #expect(reports[key] == javaPartition(Array(key.utf8), partitions: partitions), "a push-to-start key is hashed whole")
        }
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

/// The partition Kafka's Java client gives a key: murmur2 (seed 0x9747b28c) of its bytes, made
/// positive, modulo the partition count. Written from the algorithm, not from Islet's code.
func javaPartition(_ key: [UInt8], partitions: Int) -> Int32 {
    let m: UInt32 = 0x5bd1_e995
    let r: UInt32 = 24
    var h: UInt32 = 0x9747_b28c ^ UInt32(key.count)
    let whole = key.count / 4
    for i in 0..<whole {
        var k = UInt32(key[i * 4]) | UInt32(key[i * 4 + 1]) << 8 | UInt32(key[i * 4 + 2]) << 16 | UInt32(key[i * 4 + 3]) << 24
        k = k &* m
        k ^= k >> r
        k = k &* m
        h = h &* m
        h ^= k
    }
    let tail = key.count % 4
    let base = whole * 4
    if tail == 3 { h ^= UInt32(key[base + 2]) << 16 }
    if tail >= 2 { h ^= UInt32(key[base + 1]) << 8 }
    if tail >= 1 {
        h ^= UInt32(key[base])
        h = h &* m
    }
    h ^= h >> 13
    h = h &* m
    h ^= h >> 15
    return Int32((h & 0x7fff_ffff) % UInt32(partitions))
}
