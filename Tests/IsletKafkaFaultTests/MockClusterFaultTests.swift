import Foundation
import IsletKafka
import Logging
import Synchronization
import Testing

/// Every verdict the producer gave, by record number.
final class VerdictLog: Sendable {
    private let verdicts = Mutex<[Int: [Result<KafkaDeliveryReport, KafkaError>]]>([:])

    func record(_ index: Int, _ result: Result<KafkaDeliveryReport, KafkaError>) {
        verdicts.withLock { $0[index, default: []].append(result) }
    }

    var all: [Int: [Result<KafkaDeliveryReport, KafkaError>]] { verdicts.withLock { $0 } }
}

@Suite("Producer under broker faults (librdkafka mock cluster)", .timeLimit(.minutes(3)))
struct MockClusterFaultTests {
    static let records = 10_000
    static let keys = 40

    /// Produces `records` records in order from one loop (many in flight), running `fault(i)` before
    /// record i, and returns every verdict.
    func produceStream(
        to cluster: KafkaMockCluster, topic: String, settings: [String: String] = [:], fault: @Sendable (Int) async throws -> Void
    ) async throws -> [Int: [Result<KafkaDeliveryReport, KafkaError>]] {
        let producer = try KafkaProducer(
            configuration: .init(
                bootstrapServers: cluster.bootstrapServers, flushTimeout: .seconds(60),
                settings: ["message.timeout.ms": "60000"].merging(settings) { $1 }.merging(ProcessInfo.processInfo.environment["ISLET_TEST_KAFKA_DEBUG"].map { ["debug": $0] } ?? [:]) { $1 }),
            logger: logger)
        let log = VerdictLog()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            for i in 0..<Self.records {
                try await fault(i)
                while true {
                    do {
                        try producer.produce(topic: topic, key: Array("key-\(i % Self.keys)".utf8), value: Array("\(i)".utf8)) { result in
                            log.record(i, result)
                        }
                        break
                    } catch let error as KafkaError where error.isQueueFull {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                }
                // About 2,000 records a second: the stream spans the faults.
                if i % 20 == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
            producer.shutdown()
            try await group.waitForAll()
        }
        return log.all
    }

    /// Reads everything on the topic back: partition → record numbers in offset order.
    func readBack(from cluster: KafkaMockCluster, topic: String, expected: Int) async throws -> [Int32: [Int]] {
        let consumer = try KafkaConsumer(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, groupID: "readback-\(UUID().uuidString)", topics: [topic]),
            logger: logger)
        return try await withThrowingTaskGroup(of: [Int32: [Int]]?.self) { group in
            group.addTask { try await consumer.run(); return nil }
            group.addTask {
                // Reading stops after 60 s whatever happens: the checks then report what is missing.
                try? await Task.sleep(for: .seconds(60))
                consumer.shutdown()
                return nil
            }
            group.addTask {
                var read: [Int32: [Int]] = [:]
                var count = 0
                for await message in consumer.messages {
                    read[message.partition, default: []].append(Int(String(decoding: message.value ?? [], as: UTF8.self))!)
                    count += 1
                    if count >= expected { break }
                }
                return read
            }
            var result: [Int32: [Int]] = [:]
            while let value = try await group.next() {
                if let value {
                    result = value
                    group.cancelAll()
                }
            }
            return result
        }
    }

    func check(verdicts: [Int: [Result<KafkaDeliveryReport, KafkaError>]], read: [Int32: [Int]]) {
        // Exactly one verdict per record.
        #expect(verdicts.count == Self.records)
        #expect(verdicts.values.allSatisfy { $0.count == 1 }, "a record got more than one verdict")
        var acknowledged: [Int: KafkaDeliveryReport] = [:]
        for (i, results) in verdicts {
            if case .success(let report) = results.first { acknowledged[i] = report }
        }
        let failures = verdicts.compactMap { entry -> String? in
            if case .failure(let error) = entry.value.first { return "\(entry.key): \(error.librdkafkaName ?? error.message)" }
            return nil
        }
        #expect(acknowledged.count == Self.records, "\(failures.count) failed, e.g. \(failures.prefix(3))")

        // Every acknowledged record read back exactly once, where its report said, in order per partition.
        let everything = read.values.flatMap { $0 }
        #expect(everything.count == Set(everything).count, "\(everything.count - Set(everything).count) records written twice")
        var missing: [Int] = []
        for (i, report) in acknowledged {
            if read[report.partition]?.contains(i) != true { missing.append(i) }
        }
        #expect(missing.isEmpty, "\(missing.count) acknowledged records not read back, e.g. \(missing.sorted().prefix(5))")
        for (partition, numbers) in read {
            #expect(numbers == numbers.sorted(), "partition \(partition) out of order")
        }
    }

    @Test("a broker goes down and comes back during 10,000 idempotent sends")
    func brokerDownAndUp() async throws {
        let cluster = try KafkaMockCluster(brokers: 3)
        let topic = "faults-down-up"
        try cluster.createTopic(topic, partitions: 3, replicationFactor: 3)
        let verdicts = try await produceStream(to: cluster, topic: topic) { i in
            switch i {
            case 2_000: cluster.setBroker(1, up: false)
            case 3_500: cluster.setBroker(1, up: true)
            case 6_000: cluster.setBroker(2, up: false)
            case 6_500: cluster.setBroker(3, up: false)
            case 7_500:
                cluster.setBroker(2, up: true)
                cluster.setBroker(3, up: true)
            default: break
            }
        }
        let read = try await readBack(from: cluster, topic: topic, expected: Self.records)
        check(verdicts: verdicts, read: read)
    }

    @Test("produce requests fail with retriable errors during 10,000 idempotent sends")
    func injectedProduceErrors() async throws {
        let cluster = try KafkaMockCluster(brokers: 3)
        let topic = "faults-injected"
        try cluster.createTopic(topic, partitions: 3, replicationFactor: 3)
        let errors: [KafkaMockCluster.ErrorCode] = [
            .notLeaderForPartition, .requestTimedOut, .notEnoughReplicas, .notEnoughReplicasAfterAppend, .leaderNotAvailable,
        ]
        // One request in flight per connection. The mock cluster checks idempotent sequence numbers
        // only for transactional producers (rd_kafka_mock_validate_records returns early without a
        // transactional.id), so when an injected error hits one request and not the next one in
        // flight, it appends the later batch out of order where a real broker answers
        // OUT_OF_ORDER_SEQUENCE_NUMBER; librdkafka then, correctly for a real broker, counts the
        // earlier batch as persisted. With one request in flight that situation cannot arise.
        let verdicts = try await produceStream(
            to: cluster, topic: topic, settings: ["max.in.flight.requests.per.connection": "1"]
        ) { i in
            if i % 2_000 == 1_000 {
                cluster.injectErrors(errors, into: .produce)
            }
        }
        let read = try await readBack(from: cluster, topic: topic, expected: Self.records)
        check(verdicts: verdicts, read: read)
    }

    @Test("records that cannot be persisted in time each get one failure verdict, and nothing else")
    func brokersDownPastTheTimeout() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "faults-timeout"
        try cluster.createTopic(topic, partitions: 2, replicationFactor: 1)
        cluster.setBroker(1, up: false)
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, settings: ["message.timeout.ms": "1000"]), logger: logger)
        let outcomes = try await running(producer) { await sendMany(producer, topic: topic, count: 100) }
        #expect(outcomes.count == 100)
        #expect(Set(outcomes) == ["_MSG_TIMED_OUT"])
    }
}
