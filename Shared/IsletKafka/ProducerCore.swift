import Foundation
import Logging
import Metrics
import Synchronization

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
