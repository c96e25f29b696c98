import Foundation
import IsletKafka
import IsletTesting
import Synchronization
import Testing

@Suite("Replica consumers against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(2)))
struct ReplicaTests {
    /// What a replica saw, in order.
    actor Seen {
        var assigned: [KafkaTopicPartition] = []
        var values: [Int32: [String]] = [:]
        var ended: Set<KafkaTopicPartition> = []

        func record(_ event: KafkaConsumerEvent) {
            switch event {
            case .partitionsAssigned(let partitions): assigned += partitions
            case .message(let message): values[message.partition, default: []].append(String(decoding: message.value ?? [], as: UTF8.self))
            case .partitionEnd(let partition): ended.insert(partition)
            case .partitionsRevoked: break
            }
        }
    }

    /// Reads `topic` as a replica until every partition reached its end and `count` records were
    /// read; returns what it saw.
    func readAll(_ servers: String, topic: String, count: Int) async throws -> Seen {
        let replica = try KafkaConsumer(configuration: .replica(bootstrapServers: servers, topics: [topic]), logger: testLogger)
        let seen = Seen()
        try await withRunning([replica], limit: .seconds(30), "a replica catching up") {
            for await event in replica.events {
                await seen.record(event)
                let (assigned, ended, read) = await (seen.assigned, seen.ended, seen.values.values.map(\.count).reduce(0, +))
                if !assigned.isEmpty, ended == Set(assigned), read >= count { break }
            }
        }
        return seen
    }

    @Test("a replica reads every partition from the start, reports each partition's end, and two replicas see the same")
    func replicaReadsEverything() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("replica")
        try await createTopic(servers, topic, partitions: 3, configs: ["cleanup.policy": "compact"])
        try await withProducer(try makeProducer(servers)) { producer in
            for i in 0..<300 {
                try await producer.send(topic: topic, key: "k\(i % 17)", value: Array("\(i)".utf8))
            }
        }
        // Two replicas, one after the other (a restarted instance): neither joins a group, both read it all.
        let first = try await readAll(servers, topic: topic, count: 300)
        let second = try await readAll(servers, topic: topic, count: 300)
        let expectedPartitions = Set((0..<3).map { KafkaTopicPartition(topic: topic, partition: Int32($0)) })
        #expect(Set(await first.assigned) == expectedPartitions)
        #expect(await first.ended == expectedPartitions)
        let firstValues = await first.values
        #expect(firstValues.values.map(\.count).reduce(0, +) == 300)
        for (_, values) in firstValues {
            let numbers = values.map { Int($0)! }
            #expect(numbers == numbers.sorted(), "a partition's records come in offset order")
        }
        #expect(await second.values == firstValues)
    }

    @Test("a replica starts at the positions it is given, per topic and partition, but never before the first record since its time")
    func startPositions() async throws {
        let servers = try TestBroker.servers()
        let (first, second) = (uniqueName("replica-a"), uniqueName("replica-b"))
        try await createTopic(servers, first, partitions: 1)
        try await createTopic(servers, second, partitions: 1)
        func produce(_ values: Range<Int>) async throws {
            try await withProducer(try makeProducer(servers)) { producer in
                for i in values {
                    for topic in [first, second] { try await producer.send(topic: topic, key: "k", value: Array("\(i)".utf8), partition: 0) }
                }
            }
        }
        // Records 0-9, then `since` (the broker's timestamps are milliseconds: a gap on each side), then 10-19.
        try await produce(0..<10)
        try await Task.sleep(for: .milliseconds(50))
        let since = Date()
        try await Task.sleep(for: .milliseconds(50))
        try await produce(10..<20)
        var configuration = KafkaConsumerConfiguration.replica(bootstrapServers: servers, topics: [first, second], since: since)
        // first: from offset 15 (after `since`); second: from offset 2, before `since` (a stale position): from offset 10.
        configuration.replicaStartPositions = [
            KafkaTopicPartition(topic: first, partition: 0): 15, KafkaTopicPartition(topic: second, partition: 0): 2,
        ]
        let replica = try KafkaConsumer(configuration: configuration, logger: testLogger)
        let read = Mutex<[String: [String]]>([:])
        try await withRunning([replica], limit: .seconds(30), "a replica from positions") {
            var catchUp = ReplicaCatchUp(topics: [first, second])
            for await event in replica.events {
                if case .message(let message) = event {
                    read.withLock { $0[message.topic, default: []].append(String(decoding: message.value ?? [], as: UTF8.self)) }
                }
                if catchUp.note(event) { break }
            }
        }
        #expect(read.withLock { $0[first] } == (15..<20).map { "\($0)" })
        #expect(read.withLock { $0[second] } == (10..<20).map { "\($0)" })
    }

    /// Regression: a replica that fell behind the end of its partitions and did not gain on it (the
    /// services' token tables at a million registrations, reading far slower than token-registry
    /// wrote) left `/health` at 200 with the table stale. Here the caller stops taking records, so
    /// the replica stops where its buffer is full while the partition holds thousands more.
    @Test("a replica behind the end of its partitions and not gaining is not ready, saying how far; ready again once it caught up")
    func fallingBehindIsNotReady() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("behind")
        try await createTopic(servers, topic, partitions: 1)
        try await withProducer(try makeProducer(servers, settings: ["linger.ms": "20"])) { producer in
            try await withThrowingDiscardingTaskGroup { group in
                for i in 0..<3_000 { group.addTask { try await producer.send(topic: topic, key: "k", value: Array("\(i)".utf8)) } }
            }
        }
        var configuration = KafkaConsumerConfiguration.replica(bootstrapServers: servers, topics: [topic], bufferCapacity: 10)
        configuration.batchSize = 10
        configuration.health.lagLookInterval = .milliseconds(200)
        configuration.health.fallingBehindAfter = .seconds(1)
        configuration.health.lagTolerance = 100
        let replica = try KafkaConsumer(configuration: configuration, logger: testLogger)
        try await withRunning([replica], limit: .seconds(60), "a replica falling behind, then catching up") {
            // Nothing taken: the replica stops about 10 records in.
            var health = replica.health
            let deadline = ContinuousClock.now + .seconds(20)
            while health.status == .ready || health.reason?.contains("records behind") != true, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                health = replica.health
            }
            #expect(health.status == .notReady)
            #expect(health.reason?.contains("records behind the end of its partitions, not gained on for") == true, "\(health)")
            // Taken to the end: ready again at the next look (checked inside the loop: leaving
            // it stops the replica).
            var read = 0
            var caughtUp = replica.health
            for await event in replica.events {
                if case .message = event { read += 1 }
                guard read == 3_000 else { continue }
                while caughtUp != .ready, ContinuousClock.now < deadline + .seconds(20) {
                    try await Task.sleep(for: .milliseconds(100))
                    caughtUp = replica.health
                }
                break
            }
            #expect(read == 3_000)
            #expect(caughtUp == .ready)
        }
    }

    @Test("an empty topic's partitions end at once; a replica of a missing topic fails its run")
    func emptyAndMissing() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("replica-empty")
        try await createTopic(servers, topic, partitions: 2)
        let seen = try await readAll(servers, topic: topic, count: 0)
        #expect(await seen.ended.count == 2)

        let missing = try KafkaConsumer(
            configuration: .replica(bootstrapServers: servers, topics: [uniqueName("no-such-topic")], settings: ["allow.auto.create.topics": "false"]),
            logger: testLogger)
        await #expect(throws: KafkaError.self) { try await missing.run() }
    }
}

@Suite("Consumer latency against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(2)))
struct ConsumerLatencyTests {
    /// Regression: the poll thread called `rd_kafka_consume_batch_queue` with its timeout, which
    /// returns only when the batch is full or the timeout has passed — at a low rate every record
    /// waited out the whole timeout (100 ms per hop by default). With a 5 s poll timeout, a single
    /// record must arrive long before it runs out.
    @Test("a record is handed over when it arrives, not when the poll timeout runs out")
    func recordsArriveWithoutWaitingOutThePollTimeout() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("latency")
        try await createTopic(servers, topic, partitions: 1)
        var configuration = KafkaConsumerConfiguration.replica(bootstrapServers: servers, topics: [topic])
        configuration.pollTimeout = .seconds(5)
        let replica = try KafkaConsumer(configuration: configuration, logger: testLogger)
        let producer = try makeProducer(servers)
        let trips = try await withRunning([replica, producer], limit: .seconds(60), "three records' trips") { () async throws -> [Duration] in
            var trips: [Duration] = []
            var sentAt = ContinuousClock.now
            reading: for await event in replica.events {
                switch event {
                case .partitionEnd where trips.isEmpty:
                    // Caught up with the empty topic: one record at a time from here.
                    sentAt = ContinuousClock.now
                    try await producer.send(topic: topic, key: "k", value: Array("0".utf8))
                case .message:
                    trips.append(ContinuousClock.now - sentAt)
                    if trips.count == 3 { break reading }
                    sentAt = ContinuousClock.now
                    try await producer.send(topic: topic, key: "k", value: Array("\(trips.count)".utf8))
                default:
                    continue
                }
            }
            return trips
        }
        #expect(trips.count == 3)
        #expect(trips.allSatisfy { $0 < .milliseconds(4_000) }, "trips: \(trips) (the bug this guards against shows as about 5 s)")
    }
}
