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
/// and nothing acknowledged is lost.
///
/// It recovers by itself. When librdkafka declares the client unusable — a fatal error, or the
/// broker refusing the idempotent producer's identity (``KafkaError/requiresNewClient``) — the
/// client is closed and a new one takes its place: what the old one held is failed to its senders
/// (a retriable error; an HTTP caller answers 503 and the client retries), sends during the swap
/// fail at once, and sending works again without a restart. ``health`` says what it can do now:
/// not ready while the cluster does not answer or the client is being recreated, `failed` when
/// recreation keeps failing (``KafkaHealthPolicy/maximumRecoveries``).
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
    /// The client in use and its generation (bumped by every recreation). `nil` while one is
    /// being recreated.
    private struct Current {
        var client: RDKafkaClient?
        var generation: UInt64
    }

    private let current: Mutex<Current>
    private let core: ProducerCore
    private let configuration: KafkaProducerConfiguration
    private let properties: [String: String]
    private let statistics: (@Sendable (String) -> Void)?
    private let logger: Logger

    /// - Parameter statistics: receives librdkafka's statistics (its JSON document) every
    ///   `statistics.interval.ms`, a setting of `configuration` (off by default).
    public init(
        configuration: KafkaProducerConfiguration, logger: Logger, statistics: (@Sendable (String) -> Void)? = nil
    ) throws(KafkaError) {
        let core = ProducerCore(logger: logger, policy: configuration.health)
        let properties = try configuration.librdkafkaProperties()
        self.core = core
        self.configuration = configuration
        self.properties = properties
        self.statistics = statistics
        self.logger = logger
        let client = try Self.makeClient(properties: properties, core: core, logger: logger, statistics: statistics, generation: 1)
        self.current = Mutex(Current(client: client, generation: 1))
    }

    private static func makeClient(
        properties: [String: String], core: ProducerCore, logger: Logger, statistics: (@Sendable (String) -> Void)?, generation: UInt64
    ) throws(KafkaError) -> RDKafkaClient {
        try RDKafkaClient(
            kind: .producer,
            properties: properties,
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: { failure in core.reported(failure, generation: generation) },
                onError: { error in core.clientError(error, generation: generation) },
                onStatistics: statistics,
                hashedKeyRange: KafkaPartitioner.hashedKeyRange))
    }

    /// Sends one record and returns once the broker has persisted it (acks=all), or throws why not.
    ///
    /// Waits (without blocking a thread) while librdkafka's queue is full. With a
    /// ``KafkaProducerConfiguration/sendTimeout``, throws a retriable ``KafkaError/Code/timeout``
    /// once that has passed without a verdict (the record may still be persisted later). Cancelling
    /// the calling task does not withdraw a record already handed to librdkafka: the call still
    /// returns its verdict.
    /// - Parameters:
    ///   - partition: a fixed partition; `nil` lets librdkafka's partitioner choose by key.
    @discardableResult
    public func send(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil
    ) async throws -> KafkaDeliveryReport {
        let timeout = configuration.sendTimeout
        let deadline = timeout.map { MonotonicTime.now() &+ MonotonicTime.nanoseconds($0) }
        while true {
            // Resumed exactly once (``SendWaiter``): by the record's one delivery report, here when
            // librdkafka refused the record (then it has no report), or by the poll loop at the deadline.
            let attempt: SendAttempt = try await withUnsafeThrowingContinuation { continuation in
                let waiter = SendWaiter(continuation)
                if let deadline, let timeout { core.expire(waiter, at: deadline, after: timeout) }
                do throws(KafkaError) {
                    try produce(topic: topic, key: key, value: value, headers: headers, partition: partition) { result in
                        waiter.finish(result.map(SendAttempt.delivered).mapError { $0 as any Error })
                    }
                } catch {
                    waiter.finish(RDKafkaClient.isQueueFull(error) ? .success(.queueFull) : .failure(error))
                }
            }
            switch attempt {
            case .delivered(let report):
                return report
            case .queueFull:
                // librdkafka's queue drains as deliveries complete: try again after the next ones.
                try Task.checkCancellation()
                if let deadline, let timeout, MonotonicTime.now() >= deadline { throw ProducerCore.timedOut(after: timeout) }
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
    /// down or being recreated, or librdkafka refused it (its queue is full: `isRetriable`, try
    /// again shortly).
    public func produce(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil,
        onDelivery: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) throws(KafkaError) {
        try core.whileAccepting { () throws(KafkaError) in
            let (client, clientGeneration) = current.withLock { ($0.client, $0.generation) }
            guard let client else { throw core.recoveringError() }
            let generation = core.reportGeneration
            let delivery = RDKafkaDelivery(topic: topic, handler: onDelivery)
            if let error = client.produce(topic: topic, partition: partition, key: key, value: value, headers: headers, delivery: delivery) {
                if error.isQueueFull {
                    core.refusedForCapacity(at: generation)
                } else {
                    core.failedMetric.increment()
                    // A client in librdkafka's fatal state refuses every record: replace it.
                    if error.requiresNewClient { core.requestRecreation(of: clientGeneration, reason: error) }
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

    /// What the producer can do now (for `/health`).
    public var health: KafkaClientHealth { core.health() }

    /// Serves delivery reports until shutdown (graceful shutdown, task cancellation or ``shutdown()``),
    /// then flushes what is in flight (up to the configured flush timeout), fails what could not be
    /// flushed, and returns. Recreates the client whenever librdkafka declares it unusable; never
    /// throws for that.
    public func run() async throws {
        guard core.start() else {
            throw KafkaError(code: .shutdown, message: "KafkaProducer.run() may be called once")
        }
        let core = self.core
        let flushMilliseconds = configuration.flushTimeout.librdkafkaMilliseconds
        let logger = self.logger
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withDiscardingTaskGroup { group in
                    group.addTask {
                        await core.cluster.probe(policy: self.configuration.health, while: { !core.stopRequested }) {
                            self.current.withLock { $0.client }
                        }
                    }
                    await DedicatedThread.run(name: "islet-kafka-producer") {
                        var seenDeliveries = core.deliveries
                        while !core.stopRequested {
                            let (client, generation) = self.current.withLock { ($0.client, $0.generation) }
                            if let client, client.poll(timeoutMilliseconds: 100) > 0 {
                                core.servedReports()
                            }
                            core.expireSends(now: MonotonicTime.now())
                            let deliveries = core.deliveries
                            if deliveries != seenDeliveries {
                                seenDeliveries = deliveries
                                core.delivered(at: MonotonicTime.now())
                            }
                            if let reason = core.recreationRequested(for: generation) {
                                self.recreate(generation: generation, reason: reason)
                            }
                        }
                        core.stopAccepting()
                        let client = self.current.withLock { $0.client }
                        if let client, !client.flush(timeoutMilliseconds: flushMilliseconds) {
                            logger.warning(
                                "producer flush timed out: failing the records still in flight",
                                metadata: ["kafka.outstanding": "\(client.outstandingCount)"])
                            Self.failOutstanding(of: client, core: core, logger: logger)
                        }
                        core.servedReports()  // releases every sender still waiting for queue space
                    }
                    group.cancelAll()
                }
            } onGracefulShutdown: {
                self.shutdown()
            }
        } onCancel: {
            self.shutdown()
        }
    }

    /// Replaces the client of `generation`, which librdkafka declared unusable: no record goes to it
    /// any more, what it holds is failed to its senders, then — after a backoff when this is not
    /// the first recreation in a row — a new client takes its place. Poll thread only.
    private func recreate(generation: UInt64, reason: KafkaError) {
        let attempt = core.beginRecovery(reason: reason)
        logger.error(
            "the Kafka producer cannot go on: failing what it holds and recreating it",
            metadata: ["kafka.error": "\(reason)", "kafka.recovery": "\(attempt)"])
        let old = current.withLock { current -> RDKafkaClient? in
            defer {
                current.client = nil
                current.generation += 1
            }
            return current.client
        }
        // Calls already inside produce may still hold the old client: let them finish first.
        core.waitForProduceCalls()
        if let old { Self.failOutstanding(of: old, core: core, logger: logger) }
        core.servedReports()
        // The old handle is destroyed on a thread of its own when its last reference goes.
        var failures = 0
        while !core.stopRequested {
            let backoff = configuration.health.backoff(beforeRecovery: attempt + failures)
            if backoff > .zero && !core.sleep(backoff) { return }
            let generation = current.withLock { $0.generation }
            do {
                let client = try Self.makeClient(properties: properties, core: core, logger: logger, statistics: statistics, generation: generation)
                current.withLock { $0.client = client }
                core.endRecovery()
                logger.notice("the Kafka producer was recreated", metadata: ["kafka.recovery": "\(attempt)"])
                return
            } catch {
                logger.error("recreating the Kafka producer failed", metadata: ["kafka.error": "\(error)"])
                failures += 1
            }
        }
    }

    /// Purges what `client` holds and serves the reports, so that each sender gets its verdict.
    private static func failOutstanding(of client: RDKafkaClient, core: ProducerCore, logger: Logger) {
        let unreported = client.purgeAndServeReports(within: .seconds(30))
        if unreported > 0 {
            logger.critical("librdkafka did not report purged records", metadata: ["kafka.records": "\(unreported)"])
        }
    }

    /// Asks ``run()`` to flush and return.
    public func shutdown() {
        core.requestStop()
        current.withLock { $0.client }?.wakeUp()
    }

    /// Makes librdkafka raise a fatal error, as when the idempotent producer loses its guarantees.
    /// For tests of fatal-error handling: the client is recreated afterwards.
    public func simulateFatalError(reason: String) {
        current.withLock { $0.client }?.raiseFatalErrorForTesting(reason: reason)
    }

    /// Records handed to librdkafka and not yet reported on.
    public var inFlightCount: Int { core.inFlight }

    /// How many times the client was recreated since the producer started.
    public var recoveries: Int { core.recoveries }
}
