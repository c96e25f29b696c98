import IsletKafka
import IsletTesting
import Logging
import Synchronization
import Testing

/// No broker listens on this address: records can only time out.
private let nowhere = "127.0.0.1:9"

@Suite("Producer lifecycle without a broker", .timeLimit(.minutes(1)))
struct ProducerLifecycleTests {
    let logger = quietLogger

    @Test("a record that cannot be persisted fails its send with librdkafka's reason, within message.timeout.ms")
    func sendTimesOut() async throws {
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: nowhere, settings: ["message.timeout.ms": "300"]), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            let error = await #expect(throws: KafkaError.self) {
                try await producer.send(topic: "t", key: "k", value: Array("v".utf8))
            }
            #expect(error?.code == .delivery)
            #expect(error?.librdkafkaName == "_MSG_TIMED_OUT")
            #expect(error?.isRetriable == true)
            producer.shutdown()
            try await group.waitForAll()
        }
    }

    @Test("shutting down with records in flight: each send gets exactly one verdict, then sends are refused")
    func shutdownFailsWhatCannotBeFlushed() async throws {
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: nowhere, flushTimeout: .milliseconds(200), settings: ["message.timeout.ms": "60000"]),
            logger: logger)
        let verdicts = Mutex<[Int: Int]>([:])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            for i in 0..<50 {
                try producer.produce(topic: "t", key: nil, value: [UInt8(i)]) { result in
                    if case .failure(let error) = result {
                        #expect(error.librdkafkaName == "_PURGE_QUEUE" || error.code == .shutdown)
                    }
                    verdicts.withLock { $0[i, default: 0] += 1 }
                }
            }
            #expect(producer.inFlightCount == 50)
            producer.shutdown()
            try await group.waitForAll()
        }
        #expect(verdicts.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<50).map { ($0, 1) }))
        #expect(producer.inFlightCount == 0)
        let refused = await #expect(throws: KafkaError.self) {
            try await producer.send(topic: "t", key: "k", value: [1])
        }
        #expect(refused?.code == .shutdown)
    }

    @Test("run() can be called once")
    func runOnce() async throws {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: nowhere), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            producer.shutdown()
            try await group.waitForAll()
        }
        await #expect(throws: KafkaError.self) { try await producer.run() }
    }

    @Test("cancelling the task stops run() promptly")
    func cancellationStops() async throws {
        var configuration = KafkaProducerConfiguration(bootstrapServers: nowhere)
        // run() returns once the health probe's metadata call under way returns (its timeout).
        configuration.health = KafkaHealthPolicy(probeTimeout: .milliseconds(200))
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        // A hang, not a slow machine, is what the limit catches: a graceful stop may flush for 10 s.
        try await withTimeout(.seconds(60), "run() after its task was cancelled") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await producer.run() }
                await Task.yield()
                group.cancelAll()
                try await group.waitForAll()
            }
        }
    }
}

@Suite("Clients that are never run", .timeLimit(.minutes(1)))
struct NeverRunTests {
    @Test("a producer dropped without being run still gives every accepted record its verdict")
    func droppedProducerReportsEverything() async throws {
        let verdicts = Mutex<[String]>([])
        let allIn = AsyncStream<Void>.makeStream()
        do {
            let producer = try KafkaProducer(configuration: .init(bootstrapServers: nowhere), logger: quietLogger)
            for i in 0..<25 {
                try producer.produce(topic: "t", key: nil, value: [UInt8(i)]) { result in
                    let count = verdicts.withLock { verdicts in
                        if case .failure(let error) = result { verdicts.append(error.librdkafkaName ?? "\(error.code)") }
                        return verdicts.count
                    }
                    if count == 25 { allIn.continuation.finish() }
                }
            }
        }  // the producer is released here; its handle is destroyed on a thread of its own
        for await _ in allIn.stream {}
        #expect(verdicts.withLock { $0 }.count == 25)
        #expect(Set(verdicts.withLock { $0 }) == ["_PURGE_QUEUE"])
    }

    @Test("a consumer whose subscription fails ends its events and run() throws")
    func failedSubscription() async throws {
        let consumer = try KafkaConsumer(
            configuration: .init(bootstrapServers: nowhere, groupID: "g", topics: ["^(unclosed"]), logger: quietLogger)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await #expect(throws: KafkaError.self) { try await consumer.run() }
            }
            for await _ in consumer.events {}  // must end
            await group.waitForAll()
        }
    }

    @Test("an empty group id is refused when the consumer is made")
    func emptyGroup() {
        #expect(throws: KafkaError.self) {
            try KafkaConsumer(configuration: .init(bootstrapServers: nowhere, groupID: "", topics: ["t"]), logger: quietLogger)
        }
    }
}
