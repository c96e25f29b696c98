// Throughput of the Swift Kafka wrapper, for comparison with librdkafka's rdkafka_performance
// (scripts/bench-kafka.sh runs both against the same broker and prints the ratio).
//
//   islet-kafka-bench produce --bootstrap 127.0.0.1:9092 --topic t --count 200000 --size 300
//   islet-kafka-bench consume --bootstrap 127.0.0.1:9092 --topic t --count 200000
//   islet-kafka-bench follow --bootstrap 127.0.0.1:9092 --topic t -X fetch.wait.max.ms=10
//
// Prints one line of JSON: {"mode":…,"messages":…,"bytes":…,"seconds":…,"messagesPerSecond":…,"megabytesPerSecond":…}
import ArgumentParser
import Foundation
import IsletKafka
import IsletTokens
import Logging
import Synchronization

@main
struct KafkaBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-kafka-bench",
        abstract: "Produce or consume throughput of Islet's Kafka wrapper.",
        subcommands: [CreateTopic.self, CountRecords.self, Produce.self, Send.self, Consume.self, Follow.self])
}

struct CreateTopic: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "create-topic", abstract: "Create a topic (if absent).")
    @Option(help: "bootstrap.servers") var bootstrap: String
    @Option(help: "The topic.") var topic: String
    @Option(help: "Partitions.") var partitions: Int = 4

    func run() async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: benchLogger)
        _ = try await admin.createTopics([.init(name: topic, partitions: partitions)])
    }
}

struct CountRecords: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "count-records",
        abstract: "Print how many records a topic holds, read from the start to each partition's end.",
        discussion: "Reads rather than adds up high watermarks: on the local broker (tansu) those advance once per produced batch.")
    @Option(help: "bootstrap.servers") var bootstrap: String
    @Option(help: "The topic.") var topic: String
    @Option(help: "Give up after this many seconds.") var timeout: Int = 120

    func run() async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: benchLogger)
        guard let partitions = try await admin.partitionCount(of: topic) else { throw ValidationError("no topic \(topic)") }
        let consumer = try KafkaConsumer(configuration: .replica(bootstrapServers: bootstrap, topics: [topic]), logger: benchLogger)
        let seconds = timeout
        let count = try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask { try await consumer.run(); return nil }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                consumer.shutdown()
                return nil
            }
            group.addTask {
                var count = 0
                var ended = Set<Int32>()
                for await event in consumer.events {
                    switch event {
                    case .message: count += 1
                    case .partitionEnd(let partition): ended.insert(partition.partition)
                    default: break
                    }
                    if ended.count == partitions { return count }
                }
                return nil
            }
            var result: Int?
            while let next = try await group.next() {
                if let next {
                    result = next
                    group.cancelAll()
                    consumer.shutdown()
                }
            }
            return result
        }
        guard let count else { throw ValidationError("\(topic) was not read to its end within \(seconds) s") }
        print(count)
    }
}

struct CommonOptions: ParsableArguments {
    @Option(help: "bootstrap.servers") var bootstrap: String
    @Option(help: "The topic.") var topic: String
    @Option(help: "How many messages.") var count: Int = 200_000
    @Option(name: [.customShort("X"), .customLong("property")], help: "A librdkafka property, name=value (repeatable).") var properties: [String] = []

    var settings: [String: String] {
        Dictionary(
            properties.compactMap { pair in
                let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                return parts.count == 2 ? (parts[0], parts[1]) : nil
            }, uniquingKeysWith: { $1 })
    }
}

struct Result: Encodable {
    var mode: String
    var messages: Int
    var bytes: Int
    var seconds: Double
    var messagesPerSecond: Double
    var megabytesPerSecond: Double

    init(mode: String, messages: Int, bytes: Int, elapsed: Duration) {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        self.mode = mode
        self.messages = messages
        self.bytes = bytes
        self.seconds = seconds
        self.messagesPerSecond = Double(messages) / seconds
        self.megabytesPerSecond = Double(bytes) / seconds / 1_000_000
    }

    func print() {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        Swift.print(String(decoding: try! encoder.encode(self), as: UTF8.self))
    }
}

let benchLogger: Logger = {
    var logger = Logger(label: "islet.bench")
    logger.logLevel = .warning
    return logger
}()

/// Keyless records, librdkafka's partitioner choosing (as rdkafka_performance does), each one's
/// verdict counted from its delivery callback: the wrapper's fastest path, many records in flight
/// from one loop.
struct Produce: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Produce with per-record delivery callbacks.")
    @OptionGroup var common: CommonOptions
    @Option(help: "Message size in bytes.") var size: Int = 300

    func run() async throws {
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: common.bootstrap, clientID: "islet-bench", settings: common.settings), logger: benchLogger)
        let payload = [UInt8](repeating: 0x61, count: size)
        let done = DeliveryCounter(expected: common.count)
        let clock = ContinuousClock()
        let elapsed = try await withThrowingTaskGroup(of: Duration?.self) { group in
            group.addTask { try await producer.run(); return nil }
            let start = clock.now
            // ArgumentParser's property wrappers are slow to read: take plain values for the loop.
            let (topic, count) = (common.topic, common.count)
            var next = 0
            while next < count {
                next = Self.enqueue(producer, topic: topic, count: count, from: next, payload: payload, counter: done)
                if next < count {
                    await producer.waitForCapacity()  // librdkafka's queue is full
                }
            }
            await done.wait()
            let elapsed = clock.now - start
            producer.shutdown()
            var result: Duration?
            for try await value in group { if let value { result = value } }
            return result ?? elapsed
        }
        guard done.failures == 0 else { throw ValidationError("\(done.failures) records failed") }
        Result(mode: "produce", messages: common.count, bytes: common.count * size, elapsed: elapsed).print()
    }
}

extension Produce {
    /// Hands records to librdkafka until its queue is full; returns the next record's number.
    static func enqueue(
        _ producer: KafkaProducer, topic: String, count: Int, from first: Int, payload: [UInt8], counter: DeliveryCounter
    ) -> Int {
        var i = first
        while i < count {
            do {
                try producer.produce(topic: topic, key: nil, value: payload) { result in counter.record(result) }
            } catch {
                if error.isQueueFull { return i }
                fatalError("produce failed: \(error)")
            }
            i += 1
        }
        return i
    }
}

/// The API services use: `await send(...)` per record, many concurrent tasks.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Produce with async send from concurrent tasks.")
    @OptionGroup var common: CommonOptions
    @Option(help: "Message size in bytes.") var size: Int = 300
    @Option(help: "Concurrent senders.") var concurrency: Int = 1_000

    func run() async throws {
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: common.bootstrap, clientID: "islet-bench", settings: common.settings), logger: benchLogger)
        let payload = [UInt8](repeating: 0x61, count: size)
        let clock = ContinuousClock()
        let (count, concurrency, topic) = (common.count, concurrency, common.topic)
        let elapsed = try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            let start = clock.now
            try await withThrowingTaskGroup(of: Void.self) { senders in
                for worker in 0..<concurrency {
                    senders.addTask {
                        var i = worker
                        while i < count {
                            try await producer.send(topic: topic, key: nil as [UInt8]?, value: payload)
                            i += concurrency
                        }
                    }
                }
                try await senders.waitForAll()
            }
            let elapsed = clock.now - start
            producer.shutdown()
            try await group.waitForAll()
            return elapsed
        }
        Result(mode: "send", messages: count, bytes: count * size, elapsed: elapsed).print()
    }
}

/// A consumer-group member reading from the beginning, marking every message processed; timed from
/// the first message to the last (as rdkafka_performance times its consumer).
struct Consume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Consume as a group member, marking each message.")
    @OptionGroup var common: CommonOptions
    @Option(help: "Consumer group (default: a new one, so it reads from the beginning).") var group: String?

    func run() async throws {
        let consumer = try KafkaConsumer(
            configuration: .init(
                bootstrapServers: common.bootstrap, groupID: group ?? "islet-bench-\(UUID().uuidString)", topics: [common.topic],
                clientID: "islet-bench", settings: common.settings),
            logger: benchLogger)
        let clock = ContinuousClock()
        let count = common.count
        let (elapsed, bytes) = try await withThrowingTaskGroup(of: (Duration, Int)?.self) { group in
            group.addTask { try await consumer.run(); return nil }
            var received = 0
            var bytes = 0
            var start: ContinuousClock.Instant?
            for await message in consumer.messages {
                if start == nil { start = clock.now }
                bytes += message.value?.count ?? 0
                consumer.markProcessed(message)
                received += 1
                if received == count { break }
            }
            let elapsed = clock.now - (start ?? clock.now)
            consumer.shutdown()
            var result: (Duration, Int)? = (elapsed, bytes)
            for try await value in group where value != nil { result = value }
            guard received == count else { throw ValidationError("read \(received) of \(count) messages") }
            return result!
        }
        Result(mode: "consume", messages: count, bytes: bytes, elapsed: elapsed).print()
    }
}

/// Counts delivery verdicts (lock-free: it runs once per record) and wakes the waiter when all are in.
final class DeliveryCounter: Sendable {
    private let expected: Int
    private let delivered = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)
    private let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
    private let done = Atomic<Bool>(false)

    init(expected: Int) { self.expected = expected }

    var failures: Int { failed.load(ordering: .relaxed) }

    func record(_ result: Swift.Result<KafkaDeliveryReport, KafkaError>) {
        if case .failure = result { failed.add(1, ordering: .relaxed) }
        if delivered.add(1, ordering: .acquiringAndReleasing).newValue == expected {
            done.store(true, ordering: .releasing)
            waiter.withLock { $0.take() }?.resume()
        }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let finished = waiter.withLock { waiter -> Bool in
                if done.load(ordering: .acquiring) { return true }
                waiter = continuation
                return false
            }
            if finished { continuation.resume() }
        }
    }
}

/// A replica that follows a topic as the token tables read it (``PartitionTokenLoader``'s replica
/// configuration: its fetch wait and queue size unless `-X` says otherwise), printing every 5 s each partition's next offset against the high
/// watermark the broker reports, `!STALL` where it did not move while behind, and the replica's
/// health. For finding how a broker serves a reader that fell behind (docs/operations.md).
struct Follow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Follow a topic as a token table's replica does, printing its positions.")
    @OptionGroup var common: CommonOptions
    @Option(help: "Stop after this many seconds.") var seconds: Int = 600
    @Option(help: "Busy work per record, in µs (a slower table).") var workMicroseconds: Int = 0
    @Option(help: "Only these partitions (repeatable; default: all).") var partitions: [Int32] = []

    func run() async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: common.bootstrap), logger: benchLogger)
        let topic = common.topic
        guard let count = try await admin.partitionCount(of: topic) else { throw ValidationError("no topic \(topic)") }
        let watched = partitions.isEmpty ? Array(0..<Int32(count)) : partitions
        let configuration = PartitionTokenLoader.replicaConfiguration(
            bootstrapServers: common.bootstrap, topic: topic, partitions: watched, clientID: "follow", settings: common.settings)
        let consumer = try KafkaConsumer(configuration: configuration, logger: benchLogger)
        let positions = FollowPositions()
        let work = workMicroseconds
        let seconds = self.seconds
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            group.addTask {
                for await event in consumer.events {
                    if case .message(let m) = event {
                        positions.value.withLock { $0[m.partition] = m.offset + 1 }
                        if work > 0 {
                            let until = ContinuousClock.now + .microseconds(work)
                            while ContinuousClock.now < until {}
                        }
                    }
                }
            }
            group.addTask {
                var last: [Int32: Int64] = [:]
                let start = ContinuousClock.now
                while ContinuousClock.now - start < .seconds(seconds) {
                    try await Task.sleep(for: .seconds(5))
                    let now = positions.value.withLock { $0 }
                    var line = "t=\(Int((ContinuousClock.now - start) / .seconds(1)))"
                    for p in watched {
                        let high = (try? await admin.watermarks(topic: topic, partition: p).high) ?? -1
                        let pos = now[p] ?? 0
                        let stalled = pos == (last[p] ?? -1) && high > pos
                        line += " p\(p)=\(pos)/\(high)\(stalled ? "!STALL" : "")"
                    }
                    last = now
                    FileHandle.standardOutput.write(Data((line + " health=\(consumer.health)\n").utf8))
                }
                consumer.shutdown()
            }
            try await group.waitForAll()
        }
    }
}

/// Each partition's next offset, as the follower's loop saw it.
final class FollowPositions: Sendable { let value = Mutex<[Int32: Int64]>([:]) }
