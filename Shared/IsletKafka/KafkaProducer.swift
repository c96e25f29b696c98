import Foundation
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

    /// - Parameter statistics: receives librdkafka's statistics (its JSON document) every
    ///   `statistics.interval.ms`, a setting of `configuration` (off by default).
    public init(
        configuration: KafkaProducerConfiguration, logger: Logger, statistics: (@Sendable (String) -> Void)? = nil
    ) throws(KafkaError) {
        let core = ProducerCore(logger: logger)
        self.core = core
        self.configuration = configuration
        self.logger = logger
        self.client = try RDKafkaClient(
            kind: .producer,
            properties: try configuration.librdkafkaProperties(),
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: { delivered in core.reported(delivered: delivered) },
                onError: { error in core.clientError(error) },
                onStatistics: statistics))
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
                // librdkafka's queue drains as deliveries complete: try again after the next ones.
                try Task.checkCancellation()
                await core.waitForCapacity()
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
        try core.whileAccepting { () throws(KafkaError) in
            let generation = core.reportGeneration
            let delivery = RDKafkaDelivery(topic: topic, handler: onDelivery)
            if let error = client.produce(topic: topic, partition: partition, key: key, value: value, headers: headers, delivery: delivery) {
                if error.isQueueFull {
                    core.refusedForCapacity(at: generation)
                } else {
                    core.failedMetric.increment()
                }
                throw error
            }
        }
    }

    /// Returns once delivery reports were served since the last refusal for a full queue (or at
    /// shutdown, or when the task is cancelled): the moment to retry a
    /// ``produce(topic:key:value:headers:partition:onDelivery:)`` that threw `isQueueFull`.
    public func waitForCapacity() async {
        await core.waitForCapacity()
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
                        if client.poll(timeoutMilliseconds: 100) > 0 {
                            core.servedReports()
                        }
                    }
                    core.stopAccepting()
                    if !client.flush(timeoutMilliseconds: flushMilliseconds) {
                        logger.warning(
                            "producer flush timed out: failing the records still in flight",
                            metadata: ["kafka.outstanding": "\(client.outstandingCount)"])
                        client.purgeAll()
                        // librdkafka reports every purged record (_PURGE_QUEUE, _PURGE_INFLIGHT):
                        // serve those reports so each send gets its verdict.
                        let deadline = ContinuousClock.now + .seconds(30)
                        while core.inFlight > 0 && ContinuousClock.now < deadline {
                            client.poll(timeoutMilliseconds: 100)
                        }
                        if core.inFlight > 0 {
                            logger.critical("librdkafka did not report purged records", metadata: ["kafka.records": "\(core.inFlight)"])
                        }
                    }
                    core.servedReports()  // releases every sender still waiting for queue space
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

    /// Makes librdkafka raise a fatal error, as when the idempotent producer loses its guarantees.
    /// For tests of fatal-error handling only: the producer is unusable afterwards.
    public func simulateFatalError(reason: String) {
        client.raiseFatalErrorForTesting(reason: reason)
    }

    /// Records handed to librdkafka and not yet reported on.
    public var inFlightCount: Int { core.inFlight }
}

enum SendAttempt: Sendable {
    case delivered(KafkaDeliveryReport)
    case queueFull
}

/// The producer's Swift state: whether records are accepted, how many await their report, and
/// the fatal error if librdkafka raised one. Lock-free on the produce path: each record's handler
/// travels with it through librdkafka (``RDKafkaDelivery``).
final class ProducerCore: Sendable {
    private enum Lifecycle: UInt8 {
        case idle, running, stopping
    }

    private let lifecycle = Atomic<UInt8>(Lifecycle.idle.rawValue)
    /// Produce calls between their lifecycle check and librdkafka's answer. Stopping waits for
    /// them, so no record slips into librdkafka after the final flush began.
    private let producing = Atomic<Int>(0)
    private let pending = Atomic<Int>(0)
    private let stop = Atomic<Bool>(false)
    private let fatal = Mutex<KafkaError?>(nil)
    /// Set with ``fatal``: lets the produce path check without taking the lock.
    private let failed = Atomic<Bool>(false)
    private let logger: Logger
    let deliveredMetric = Counter(label: "islet_kafka_producer_delivered_total")
    let failedMetric = Counter(label: "islet_kafka_producer_failed_total")

    init(logger: Logger) {
        self.logger = logger
    }

    var stopRequested: Bool { stop.load(ordering: .acquiring) }
    var fatalError: KafkaError? { fatal.withLock { $0 } }
    var inFlight: Int { pending.load(ordering: .acquiring) }

    func start() -> Bool {
        lifecycle.compareExchange(
            expected: Lifecycle.idle.rawValue, desired: Lifecycle.running.rawValue, ordering: .sequentiallyConsistent
        ).exchanged
    }

    func requestStop() {
        stop.store(true, ordering: .releasing)
    }

    /// Runs `enqueue` (one produce call) unless the producer stopped accepting records; counts the
    /// record as pending when it was accepted.
    func whileAccepting(_ enqueue: () throws(KafkaError) -> Void) throws(KafkaError) {
        producing.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { producing.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        guard lifecycle.load(ordering: .sequentiallyConsistent) != Lifecycle.stopping.rawValue else {
            throw .shutdown("the producer is shut down")
        }
        if failed.load(ordering: .acquiring), let fatal = fatalError { throw fatal }
        pending.wrappingAdd(1, ordering: .relaxed)
        do {
            try enqueue()
        } catch {
            pending.wrappingSubtract(1, ordering: .relaxed)
            throw error
        }
    }

    private struct CapacityWaiters {
        var nextID: UInt64 = 0
        var waiting: [UInt64: (after: UInt64, continuation: CheckedContinuation<Void, Never>)] = [:]
    }

    /// Counts the poll-loop iterations that served delivery reports. Bumped under the waiters'
    /// lock, read lock-free by the produce path.
    private let generation = Atomic<UInt64>(0)
    /// The generation read before the latest produce call refused for a full queue.
    private let lastRefusal = Atomic<UInt64>(0)
    private let capacityWaiters = Mutex(CapacityWaiters())

    var reportGeneration: UInt64 { generation.load(ordering: .acquiring) }

    func refusedForCapacity(at generation: UInt64) {
        lastRefusal.store(generation, ordering: .releasing)
    }

    /// Suspends until delivery reports were served after the latest refusal for a full queue.
    /// Returns at once when that already happened, when the producer stopped accepting records, or
    /// when the task is cancelled. The check and the registration happen under the same lock as
    /// the poll thread's bump, so a wake-up cannot be missed.
    func waitForCapacity() async {
        let after = lastRefusal.load(ordering: .acquiring)
        let id = capacityWaiters.withLock { waiters -> UInt64 in
            defer { waiters.nextID &+= 1 }
            return waiters.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = capacityWaiters.withLock { waiters -> Bool in
                    if generation.load(ordering: .acquiring) > after || Task.isCancelled
                        || lifecycle.load(ordering: .sequentiallyConsistent) == Lifecycle.stopping.rawValue
                    {
                        return true
                    }
                    waiters.waiting[id] = (after, continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            capacityWaiters.withLock { $0.waiting.removeValue(forKey: id) }?.continuation.resume()
        }
    }

    /// The poll loop served delivery reports: wake the senders waiting for queue space. Also called
    /// once the producer stopped accepting records, so that every waiter returns.
    func servedReports() {
        let woken = capacityWaiters.withLock { waiters -> [CheckedContinuation<Void, Never>] in
            let now = generation.add(1, ordering: .acquiringAndReleasing).newValue
            guard !waiters.waiting.isEmpty else { return [] }
            let ready = waiters.waiting.filter { $0.value.after < now }
            for id in ready.keys { waiters.waiting.removeValue(forKey: id) }
            return ready.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    /// A delivery report arrived (poll thread).
    func reported(delivered: Bool) {
        pending.wrappingSubtract(1, ordering: .releasing)
        if delivered { deliveredMetric.increment() } else { failedMetric.increment() }
    }

    func clientError(_ error: KafkaError) {
        if error.isFatal {
            logger.error("fatal producer error: the producer stops", metadata: ["kafka.error": "\(error)"])
            fatal.withLock { if $0 == nil { $0 = error } }
            failed.store(true, ordering: .releasing)
            requestStop()
        } else {
            logger.warning("producer error", metadata: ["kafka.error": "\(error)"])
        }
    }

    /// From now on produce calls are refused; returns once the calls already under way are done,
    /// so that the flush that follows covers every accepted record.
    func stopAccepting() {
        lifecycle.store(Lifecycle.stopping.rawValue, ordering: .sequentiallyConsistent)
        while producing.load(ordering: .sequentiallyConsistent) > 0 {
            sched_yield()
        }
    }
}
