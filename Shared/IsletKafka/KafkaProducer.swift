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
                onStatistics: statistics))
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

enum SendAttempt: Sendable {
    case delivered(KafkaDeliveryReport)
    case queueFull
}

/// One awaited ``KafkaProducer/send(topic:key:value:headers:partition:)``: its continuation,
/// resumed by whichever comes first — the record's verdict or its deadline — and never twice.
final class SendWaiter: Sendable {
    private let continuation: Mutex<UnsafeContinuation<SendAttempt, any Error>?>

    init(_ continuation: UnsafeContinuation<SendAttempt, any Error>) {
        self.continuation = Mutex(continuation)
    }

    /// Resumes the sender with `result`, unless it was resumed already; says whether it did.
    @discardableResult
    func finish(_ result: Result<SendAttempt, any Error>) -> Bool {
        let waiting = continuation.withLock { waiting in
            defer { waiting = nil }
            return waiting
        }
        waiting?.resume(with: result)
        return waiting != nil
    }
}

/// The deadlines of awaited sends, in the order they were registered (one timeout per producer, so
/// that is the order they fall due), checked by the poll loop after each poll (every 100 ms at most).
struct SendDeadlines {
    private var entries: [(deadline: UInt64, timeout: Duration, waiter: SendWaiter)] = []
    private var head = 0

    mutating func append(_ waiter: SendWaiter, at deadline: UInt64, after timeout: Duration) {
        entries.append((deadline, timeout, waiter))
    }

    /// Removes and returns the entries due at `now` (a waiter already finished is finished again in vain).
    mutating func due(at now: UInt64) -> [(timeout: Duration, waiter: SendWaiter)] {
        var due: [(timeout: Duration, waiter: SendWaiter)] = []
        while head < entries.count, entries[head].deadline <= now {
            due.append((entries[head].timeout, entries[head].waiter))
            head += 1
        }
        if head > 1_024, head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        return due
    }
}

/// The producer's Swift state: whether records are accepted, how many await their report, whether
/// the client must be recreated, and what its health is built from. Lock-free on the produce path
/// (the producer itself takes one uncontended lock per record, to read its current client): each
/// record's handler travels with it through librdkafka (``RDKafkaDelivery``).
final class ProducerCore: Sendable {
    private enum Lifecycle: UInt8 {
        case idle, running, stopping
    }

    private struct Recovery {
        /// The generation whose client must be replaced, and why.
        var requested: (generation: UInt64, reason: KafkaError)?
        /// Why the client is being recreated now (`nil`: it is not).
        var under: String?
        var consecutive = 0
        var total = 0
        var lastReason: String?
    }

    private let lifecycle = Atomic<UInt8>(Lifecycle.idle.rawValue)
    /// Produce calls between their lifecycle check and librdkafka's answer. Stopping waits for
    /// them, so no record slips into librdkafka after the final flush began.
    private let producing = Atomic<Int>(0)
    private let pending = Atomic<Int>(0)
    private let stop = Atomic<Bool>(false)
    /// Ends a ``sleep(_:)`` early when a stop is requested.
    private let wake = DispatchSemaphore(value: 0)
    private let recovery = Mutex(Recovery())
    /// Successful deliveries so far (the poll loop notices when the count moves).
    private let deliveredCount = Atomic<UInt64>(0)
    /// When the cluster last answered, and the probe that asks it.
    let cluster = ClusterContact()
    /// Since when records have been waiting without a successful delivery (0: none waiting).
    private let waitingSince = Atomic<UInt64>(0)
    /// The awaited sends with a deadline (``KafkaProducerConfiguration/sendTimeout``).
    private let sendDeadlines = Mutex(SendDeadlines())
    private let logger: Logger
    private let policy: KafkaHealthPolicy
    let deliveredMetric = Counter(label: "islet_kafka_producer_delivered_total")
    /// Awaited sends that gave up waiting for their record's verdict (the record's fate unknown).
    let sendTimeoutsMetric = Counter(label: "islet_kafka_producer_send_timeouts_total")
    let failedMetric = Counter(label: "islet_kafka_producer_failed_total")
    let recreatedMetric = Counter(label: "islet_kafka_producer_recreated_total")

    init(logger: Logger, policy: KafkaHealthPolicy) {
        self.logger = logger
        self.policy = policy
    }

    var stopRequested: Bool { stop.load(ordering: .acquiring) }
    var inFlight: Int { pending.load(ordering: .acquiring) }

    func start() -> Bool {
        lifecycle.compareExchange(
            expected: Lifecycle.idle.rawValue, desired: Lifecycle.running.rawValue, ordering: .sequentiallyConsistent
        ).exchanged
    }

    func requestStop() {
        stop.store(true, ordering: .releasing)
        wake.signal()
    }

    /// Runs `enqueue` (one produce call) unless the producer stopped accepting records; counts the
    /// record as pending when it was accepted.
    func whileAccepting(_ enqueue: () throws(KafkaError) -> Void) throws(KafkaError) {
        producing.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { producing.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        guard lifecycle.load(ordering: .sequentiallyConsistent) != Lifecycle.stopping.rawValue else {
            throw .shutdown("the producer is shut down")
        }
        if pending.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == 1 {
            waitingSince.compareExchange(expected: 0, desired: MonotonicTime.now(), ordering: .relaxed)
        }
        do {
            try enqueue()
        } catch {
            if pending.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 { waitingSince.store(0, ordering: .relaxed) }
            throw error
        }
    }

    /// Why sends fail while the client is being recreated.
    func recoveringError() -> KafkaError {
        .recovering(recovery.withLock { $0.under ?? $0.lastReason ?? "a fatal error" })
    }

    /// Returns once the produce calls under way are done (at most 1 s): after the client was taken
    /// away, none of them still holds it when it is purged.
    func waitForProduceCalls() {
        awaitProduceCalls(until: MonotonicTime.now() &+ 1_000_000_000)
    }

    /// Spins until no produce call is under way (or `deadline`, ``MonotonicTime``).
    private func awaitProduceCalls(until deadline: UInt64 = .max) {
        while producing.load(ordering: .sequentiallyConsistent) > 0 && MonotonicTime.now() < deadline {
            sched_yield()
        }
    }

    /// Sleeps `duration` on the calling (poll) thread, in short steps; `false` when the producer
    /// was asked to stop meanwhile.
    func sleep(_ duration: Duration) -> Bool {
        guard !stopRequested else { return false }
        _ = wake.wait(timeout: .now() + .nanoseconds(Int(clamping: MonotonicTime.nanoseconds(duration))))
        return !stopRequested
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

    /// Ends `waiter`'s wait at `deadline` if no verdict came by then.
    func expire(_ waiter: SendWaiter, at deadline: UInt64, after timeout: Duration) {
        sendDeadlines.withLock { $0.append(waiter, at: deadline, after: timeout) }
    }

    /// Fails the awaited sends whose deadline has come (poll thread).
    func expireSends(now: UInt64) {
        for (timeout, waiter) in sendDeadlines.withLock({ $0.due(at: now) }) where waiter.finish(.failure(Self.timedOut(after: timeout))) {
            sendTimeoutsMetric.increment()
        }
    }

    /// What an awaited send throws when its record got no verdict within the send timeout.
    static func timedOut(after timeout: Duration) -> KafkaError {
        KafkaError(
            code: .timeout,
            message: "no acknowledgement within \(timeout) (the record may still be persisted: its fate is unknown)",
            isRetriable: true)
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

    /// A delivery report arrived from the client of `generation` (poll thread): `failure` is `nil`
    /// when the record was persisted. A failure that leaves the client unusable asks for it to be
    /// recreated.
    func reported(_ failure: KafkaError?, generation: UInt64) {
        if pending.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 { waitingSince.store(0, ordering: .relaxed) }
        guard let failure else {
            deliveredMetric.increment()
            deliveredCount.wrappingAdd(1, ordering: .releasing)
            return
        }
        failedMetric.increment()
        if failure.requiresNewClient { requestRecreation(of: generation, reason: failure) }
    }

    /// librdkafka raised an error on the client of `generation`.
    func clientError(_ error: KafkaError, generation: UInt64) {
        cluster.observe(error)
        if error.requiresNewClient {
            requestRecreation(of: generation, reason: error)
        } else {
            logger.warning("producer error", metadata: ["kafka.error": "\(error)"])
        }
    }

    /// Asks the poll loop to replace the client of `generation`. A request for a newer client
    /// replaces one for an older client (whose last reports may still arrive while it is purged).
    func requestRecreation(of generation: UInt64, reason: KafkaError) {
        recovery.withLock { recovery in
            if let requested = recovery.requested, requested.generation >= generation { return }
            recovery.requested = (generation, reason)
        }
    }

    /// Whether the client of `generation` must be recreated, and why (poll thread). A request for
    /// an older client (its last reports) is dropped.
    func recreationRequested(for generation: UInt64) -> KafkaError? {
        recovery.withLock { recovery in
            guard let requested = recovery.requested else { return nil }
            recovery.requested = nil
            return requested.generation == generation ? requested.reason : nil
        }
    }

    /// A recreation starts; returns how many there were in a row, this one included.
    func beginRecovery(reason: KafkaError) -> Int {
        recreatedMetric.increment()
        return recovery.withLock { recovery in
            recovery.consecutive += 1
            recovery.total += 1
            recovery.under = "\(reason)"
            recovery.lastReason = "\(reason)"
            return recovery.consecutive
        }
    }

    /// The new client is in place (sending is accepted again).
    func endRecovery() {
        recovery.withLock { $0.under = nil }
    }

    var recoveries: Int { recovery.withLock { $0.total } }

    /// Successful deliveries so far.
    var deliveries: UInt64 { deliveredCount.load(ordering: .acquiring) }

    /// Records were persisted (poll thread, at `now`): the cluster answers and the client works,
    /// so the recreations in a row are over.
    func delivered(at now: UInt64) {
        cluster.heard(at: now)
        waitingSince.store(pending.load(ordering: .acquiring) > 0 ? now : 0, ordering: .relaxed)
        recovery.withLock { $0.consecutive = 0 }
    }

    func health(now: UInt64 = MonotonicTime.now()) -> KafkaClientHealth {
        let phase: KafkaHealthSnapshot.Phase
        let (under, consecutive, lastReason) = recovery.withLock { ($0.under, $0.consecutive, $0.lastReason) }
        switch Lifecycle(rawValue: lifecycle.load(ordering: .acquiring)) {
        case .idle, nil: phase = .notStarted
        case .stopping: phase = .stopping
        case .running: phase = under.map { .recovering(reason: $0) } ?? (stopRequested ? .stopping : .running)
        }
        let snapshot = KafkaHealthSnapshot(
            phase: phase, consecutiveRecoveries: consecutive, lastRecoveryReason: lastReason, lastContact: cluster.last,
            waiting: inFlight, waitingSince: waitingSince.load(ordering: .relaxed), loginRefused: cluster.loginRefused)
        return snapshot.health(now: now, policy: policy)
    }

    /// From now on produce calls are refused; returns once the calls already under way are done,
    /// so that the flush that follows covers every accepted record.
    func stopAccepting() {
        lifecycle.store(Lifecycle.stopping.rawValue, ordering: .sequentiallyConsistent)
        awaitProduceCalls()
    }
}
