import IsletKafka
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
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: nowhere), logger: logger)
        let clock = ContinuousClock()
        let elapsed = try await clock.measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await producer.run() }
                try await Task.sleep(for: .milliseconds(50))
                group.cancelAll()
                try await group.waitForAll()
            }
        }
        #expect(elapsed < .seconds(2))
    }
}

@Suite("Producer fatal errors", .timeLimit(.minutes(1)))
struct ProducerFatalErrorTests {
    @Test("a fatal error fails the records in flight and later sends, and run() throws it")
    func fatalErrorSurfaces() async throws {
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: nowhere, settings: ["message.timeout.ms": "60000"]), logger: quietLogger)
        let verdicts = Mutex<[Result<KafkaDeliveryReport, KafkaError>]>([])
        let thrown: (any Error)? = await {
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await producer.run() }
                    for i in 0..<20 {
                        try producer.produce(topic: "t", key: nil, value: [UInt8(i)]) { result in
                            verdicts.withLock { $0.append(result) }
                        }
                    }
                    producer.simulateFatalError(reason: "sequence gap")
                    try await group.waitForAll()
                }
                return nil
            } catch {
                return error
            }
        }()
        let fatal = try #require(thrown as? KafkaError, "run() returned without the fatal error")
        #expect(fatal.isFatal)
        #expect(fatal.code == .fatal)
        #expect(fatal.message.contains("sequence gap"))
        let results = verdicts.withLock { $0 }
        #expect(results.count == 20, "every record in flight got its verdict")
        #expect(results.allSatisfy { if case .failure = $0 { true } else { false } })
        await #expect(throws: KafkaError.self) { try await producer.send(topic: "t", key: "k", value: [1]) }
    }
}
