import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// An idempotent, acks=all Kafka producer whose ``send(topic:key:value:headers:partition:)``
/// completes when the record is persisted.
///
/// Batching is librdkafka's. The producer is a `Service`: ``run()`` serves delivery reports on a
/// thread of its own until shutdown, then flushes, so that every `send` gets exactly one verdict
/// and nothing acknowledged is lost. A fatal librdkafka error fails pending and later sends and
/// makes ``run()`` throw it.
///
/// ```swift
/// let producer = try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:9092"), logger: logger)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await producer.run() }
///     let report = try await producer.send(topic: "t", key: "k", value: Array("v".utf8))
///     producer.shutdown()
/// }
/// ```
public final class KafkaProducer: Service, Sendable {
    private let client: RDKafkaClient
    private let core: ProducerCore
    private let configuration: KafkaProducerConfiguration
    private let logger: Logger

    public init(configuration: KafkaProducerConfiguration, logger: Logger) throws(KafkaError) {
        let core = ProducerCore(logger: logger)
        self.core = core
        self.configuration = configuration
        self.logger = logger
        self.client = try RDKafkaClient(
            kind: .producer,
            properties: try configuration.librdkafkaProperties(),
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: { id, result in core.delivered(id: id, result: result) },
                onError: { error in core.clientError(error) }))
    }

    /// Sends one record and returns once the broker has persisted it (acks=all), or throws why not.
    ///
    /// Waits (without blocking a thread) while librdkafka's queue is full. Cancelling the calling
    /// task does not withdraw a record already handed to librdkafka: the call still returns its verdict.
    /// - Parameters:
    ///   - partition: a fixed partition; `nil` lets librdkafka's partitioner choose by key.
    @discardableResult
    public func send(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil
    ) async throws -> KafkaDeliveryReport {
        while true {
            let attempt: SendAttempt = try await withCheckedThrowingContinuation { continuation in
                do throws(KafkaError) {
                    try produce(topic: topic, key: key, value: value, headers: headers, partition: partition) { result in
                        continuation.resume(with: result.map(SendAttempt.delivered).mapError { $0 as any Error })
                    }
                } catch {
                    if RDKafkaClient.isQueueFull(error) {
                        continuation.resume(returning: .queueFull)
                    } else {
                        continuation.resume(throwing: error)
                    }
                }
            }
            switch attempt {
            case .delivered(let report):
                return report
            case .queueFull:
                // librdkafka's queue drains as deliveries complete; wait a moment and try again.
                try await Task.sleep(for: .milliseconds(1))
            }
        }
    }

    /// Hands one record to librdkafka and returns at once; `onDelivery` is then called exactly once
    /// with the verdict, on the producer's poll thread (keep it short). For callers that keep many
    /// records in flight from one loop, in order; ``send(topic:key:value:headers:partition:)`` is
    /// the usual API.
    ///
    /// Throws without calling `onDelivery` when the record was not accepted: the producer is shut
    /// down, or librdkafka refused it (its queue is full: `isRetriable`, try again shortly).
    public func produce(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil,
        onDelivery: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) throws(KafkaError) {
        let id = try core.register(onDelivery)
        if let error = client.produce(topic: topic, partition: partition, key: key, value: value, headers: headers, opaque: id) {
            // Not accepted: no delivery report will come for this id.
            _ = core.unregister(id: id)
            if !RDKafkaClient.isQueueFull(error) { core.failedMetric.increment() }
            throw error
        }
    }

    /// Sends a record whose key is a string (Islet's keys are).
    @discardableResult
    public func send(
        topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil
    ) async throws -> KafkaDeliveryReport {
        try await send(topic: topic, key: key.map { Array($0.utf8) }, value: value, headers: headers, partition: partition)
    }

    /// Serves delivery reports until shutdown (graceful shutdown, task cancellation or ``shutdown()``),
    /// then flushes what is in flight (up to the configured flush timeout), fails what could not be
    /// flushed, and returns. Throws the fatal error if librdkafka raised one.
    public func run() async throws {
        guard core.start() else {
            throw KafkaError(code: .shutdown, message: "KafkaProducer.run() may be called once")
        }
        let client = self.client
        let core = self.core
        let flushMilliseconds = configuration.flushTimeout.librdkafkaMilliseconds
        let logger = self.logger
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await DedicatedThread.run(name: "islet-kafka-producer") {
                    while !core.stopRequested {
                        client.poll(timeoutMilliseconds: 100)
                    }
                    core.beginStopping()
                    if !client.flush(timeoutMilliseconds: flushMilliseconds) {
                        logger.warning(
                            "producer flush timed out: failing the records still in flight",
                            metadata: ["kafka.outstanding": "\(client.outstandingCount)"])
                        client.purgeAll()
                        client.poll(timeoutMilliseconds: 0)
                    }
                    core.finish()
                }
            } onGracefulShutdown: {
                self.shutdown()
            }
        } onCancel: {
            self.shutdown()
        }
        if let fatal = core.fatalError {
            throw fatal
        }
    }

    /// Asks ``run()`` to flush and return.
    public func shutdown() {
        core.requestStop()
        client.wakeUp()
    }

    /// Records handed to librdkafka and not yet reported on.
    public var inFlightCount: Int { core.pendingCount }
}

enum SendAttempt: Sendable {
    case delivered(KafkaDeliveryReport)
    case queueFull
}

/// The producer's Swift state: each pending send's continuation by opaque id, and the lifecycle.
final class ProducerCore: Sendable {
    typealias DeliveryHandler = @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void

    private enum Lifecycle {
        case idle, running, stopping, finished
    }

    private struct State {
        var lifecycle = Lifecycle.idle
        var nextID: UInt64 = 1
        var pending: [UInt64: DeliveryHandler] = [:]
        var fatalError: KafkaError?
    }

    private let state = Mutex(State())
    private let stop = Atomic<Bool>(false)
    private let logger: Logger
    let deliveredMetric = Counter(label: "islet_kafka_producer_delivered_total")
    let failedMetric = Counter(label: "islet_kafka_producer_failed_total")

    init(logger: Logger) {
        self.logger = logger
    }

    var stopRequested: Bool { stop.load(ordering: .acquiring) }
    var fatalError: KafkaError? { state.withLock { $0.fatalError } }
    var pendingCount: Int { state.withLock { $0.pending.count } }

    func start() -> Bool {
        state.withLock { state in
            guard state.lifecycle == .idle else { return false }
            state.lifecycle = .running
            return true
        }
    }

    func requestStop() {
        stop.store(true, ordering: .releasing)
    }

    func register(_ handler: @escaping DeliveryHandler) throws(KafkaError) -> UInt64 {
        let result: Result<UInt64, KafkaError> = state.withLock { state in
            if let fatal = state.fatalError { return .failure(fatal) }
            switch state.lifecycle {
            case .idle, .running:
                let id = state.nextID
                state.nextID &+= 1
                state.pending[id] = handler
                return .success(id)
            case .stopping, .finished:
                return .failure(.shutdown("the producer is shut down"))
            }
        }
        return try result.get()
    }

    func unregister(id: UInt64) -> DeliveryHandler? {
        state.withLock { $0.pending.removeValue(forKey: id) }
    }

    func delivered(id: UInt64, result: Result<KafkaDeliveryReport, KafkaError>) {
        guard let handler = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return }
        switch result {
        case .success: deliveredMetric.increment()
        case .failure: failedMetric.increment()
        }
        handler(result)
    }

    func clientError(_ error: KafkaError) {
        if error.isFatal {
            logger.error("fatal producer error: the producer stops", metadata: ["kafka.error": "\(error)"])
            state.withLock { state in
                if state.fatalError == nil { state.fatalError = error }
            }
            requestStop()
        } else {
            logger.warning("producer error", metadata: ["kafka.error": "\(error)"])
        }
    }

    /// From now on sends are refused; those already registered are flushed.
    func beginStopping() {
        state.withLock { $0.lifecycle = .stopping }
    }

    /// Fails whatever flushing did not settle: every send gets exactly one verdict.
    func finish() {
        let leftovers = state.withLock { state in
            state.lifecycle = .finished
            defer { state.pending.removeAll() }
            return Array(state.pending.values)
        }
        if !leftovers.isEmpty {
            logger.warning("producer stopped with unreported records", metadata: ["kafka.records": "\(leftovers.count)"])
        }
        for handler in leftovers {
            failedMetric.increment()
            handler(.failure(.shutdown("the producer stopped before the record's delivery was reported")))
        }
    }
}
