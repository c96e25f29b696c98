import Dispatch
import Logging
import Metrics
import Synchronization

/// The consumer's ``ConsumerMachine`` under its one lock, and what performs the machine's
/// actions: the librdkafka calls (store offsets, pause, resume), resuming the caller's loop, the
/// caller's revocation and loss handlers, logs and metrics. Every method takes the lock for a
/// transition and acts after releasing it.
final class ConsumerCore: Sendable {
    typealias RevocationHandler = ConsumerMachine.RevocationHandler

    private let machine: Mutex<ConsumerMachine>
    /// The machine's revocation generation, published (inside the lock) where a revocation drops
    /// buffered messages: the caller's loop checks it on every event without taking the lock the
    /// poll thread works under.
    private let publishedGeneration = Atomic<UInt64>(0)
    /// Signalled when the caller's loop took the buffer the poll thread waits on
    /// (``ConsumerMachine/Backpressure/waitForSpace``), and on a stop. A semaphore because the
    /// poll thread is an OS thread of its own that must block, never an async task.
    private let space = DispatchSemaphore(value: 0)
    /// Signalled by a stop request only: wakes the poll thread from a recovery's backoff.
    private let stopSignal = DispatchSemaphore(value: 0)
    /// When the cluster last answered, and the probe that asks it (shared with the producer's
    /// health: lock-free, as every record and probe touches it).
    let cluster = ClusterContact()
    private let logger: Logger
    private let consumedMetric = Counter(label: "islet_kafka_consumer_messages_total")
    private let errorMetric = Counter(label: "islet_kafka_consumer_errors_total")
    private let lagGauge: Gauge

    /// `clientID` and `topics` name the lag gauge's series (a service's consumers share its client id).
    init(
        capacity: Int, inGroup: Bool = true, policy: KafkaHealthPolicy = KafkaHealthPolicy(), clientID: String = "islet", topics: [String] = [],
        logger: Logger
    ) {
        self.machine = Mutex(ConsumerMachine(capacity: capacity, inGroup: inGroup, policy: policy))
        self.logger = logger
        self.lagGauge = Gauge(label: "islet_kafka_consumer_lag_records", dimensions: Self.lagDimensions(clientID: clientID, topics: topics))
    }

    /// The lag gauge's series: one per consumer of a service, not one its consumers overwrite in turn.
    static func lagDimensions(clientID: String, topics: [String]) -> [(String, String)] {
        [("client", clientID), ("topics", topics.sorted().joined(separator: ","))]
    }

    /// How long a full buffer may wait for the caller's loop before fetching is paused, in ms.
    static let stallBeforePause = 500

    private func perform(_ resume: ConsumerMachine.Resume?) {
        guard let resume else { return }
        if resume.wakePollThread { space.signal() }
        resume.waiter?.resume(returning: resume.value)
    }

    // MARK: Lifecycle (any thread)

    func start() -> Bool { machine.withLock { $0.start() } }
    func claimIterator() -> Bool { machine.withLock { $0.claimIterator() } }
    var stopRequested: Bool { machine.withLock { $0.stopRequested } }
    var abandonRequested: Bool { machine.withLock { $0.abandonRequested } }
    /// The latest revocation's generation.
    var generation: UInt64 { publishedGeneration.load(ordering: .acquiring) }

    func requestStop() {
        machine.withLock { $0.requestStop() }
        space.signal()
        stopSignal.signal()
    }

    func requestAbandon() {
        machine.withLock { $0.requestAbandon() }
        space.signal()
        stopSignal.signal()
    }

    /// The poll loop's next step. Poll thread.
    func nextStep(fatal: KafkaError?) -> ConsumerMachine.Step { machine.withLock { $0.nextStep(fatal: fatal) } }

    /// Waits `duration`, or less once a stop was requested; `false` if it was.
    func sleep(_ duration: Duration) -> Bool {
        guard !stopRequested else { return false }
        _ = stopSignal.wait(timeout: .now() + .milliseconds(Int(duration.librdkafkaMilliseconds)))
        return !stopRequested
    }

    func setRevocationHandler(_ handler: RevocationHandler) { machine.withLock { $0.setRevocationHandler(handler) } }
    func setLossHandler(_ handler: @escaping ConsumerMachine.LossHandler) { machine.withLock { $0.setLossHandler(handler) } }

    // MARK: Marks

    func mark(_ message: KafkaMessage) -> Bool { machine.withLock { $0.mark(message) } }

    /// Hands marked offsets to librdkafka. Poll thread only (so it never races a rebalance).
    func storeMarkedOffsets(into client: RDKafkaClient) {
        let pending = machine.withLock { $0.takeMarkedOffsets() }
        guard !pending.isEmpty else { return }
        if let error = client.storeOffsets(pending) {
            logger.debug("storing marked offsets failed", metadata: ["kafka.error": "\(error)"])
        }
    }

    /// The assignment epoch of each owned partition, for stamping a batch. Poll thread.
    func assignmentEpochs() -> [KafkaTopicPartition: UInt64] { machine.withLock { $0.assignmentEpochs } }

    /// The events whose partitions are still assigned under the same epoch (non-message events are kept).
    func stillAssigned(_ events: [KafkaConsumerEvent]) -> [KafkaConsumerEvent] { machine.withLock { $0.stillAssigned(events) } }

    // MARK: Backpressure (poll thread)

    /// Pauses fetching when the caller's loop stalls on a full buffer, resumes it once the loop
    /// took half of it (``ConsumerMachine/backpressure(waited:)``). Pausing makes librdkafka drop
    /// what it prefetched beyond the records already handed over and fetch it again on resume.
    func applyBackpressure(_ client: RDKafkaClient) {
        var action = machine.withLock { $0.backpressure(waited: false) }
        if action == .waitForSpace {
            waitForSpace(milliseconds: Self.stallBeforePause)
            action = machine.withLock { $0.backpressure(waited: true) }
        }
        switch action {
        case .none, .waitForSpace: break
        case .pause(let partitions):
            logger.debug("caller's loop stalled: fetching paused", metadata: ["kafka.partitions": "\(partitions.count)"])
            client.pause(partitions)
        case .resume(let partitions):
            client.resume(partitions)
        }
    }

    /// Waits until the caller's loop took the buffer (or a stop), up to `milliseconds`.
    private func waitForSpace(milliseconds: Int) {
        let deadline = DispatchTime.now() + .milliseconds(milliseconds)
        while space.wait(timeout: deadline) == .success {
            if machine.withLock({ $0.spaceOrStop }) { return }
        }
    }

    // MARK: Rebalance (poll thread, inside librdkafka's rebalance callback)

    func didAssign(_ partitions: [KafkaTopicPartition]) {
        contact()
        perform(machine.withLock { $0.assign(partitions) })
    }

    func willRevoke(_ partitions: [KafkaTopicPartition], lost: Bool) -> [KafkaTopicPartition: Int64] {
        let work = machine.withLock { machine in
            defer { publishedGeneration.store(machine.generation, ordering: .releasing) }
            return machine.beginRevocation(partitions, lost: lost)
        }
        switch work {
        case .none: break
        // Lost: the caller is told at once, before the event reaches its loop (which may be busy).
        case .tellLoss(let handler): handler(partitions)
        case .finishWork(let handler): finishWork(on: partitions, handler)
        }
        return machine.withLock { machine in
            defer { publishedGeneration.store(machine.generation, ordering: .releasing) }
            return machine.endRevocation(partitions, lost: lost)
        }
    }

    func didRevoke(_ partitions: [KafkaTopicPartition]) {
        perform(machine.withLock { $0.revoked(partitions) })
    }

    /// Runs the caller's revocation handler and waits for it, at most its timeout. The wait is a
    /// semaphore: librdkafka's rebalance callback must not return before the caller finished (its
    /// marks are committed right after), and it runs on the poll thread, a thread of its own,
    /// never one of Swift's cooperative pool.
    private func finishWork(on partitions: [KafkaTopicPartition], _ handler: RevocationHandler) {
        let finished = DispatchSemaphore(value: 0)
        Task.detached {
            await handler.body(partitions)
            finished.signal()
        }
        // The handler logs how its work went; this says only that the consumer stopped waiting.
        if finished.wait(timeout: .now() + .milliseconds(Int(handler.timeout.librdkafkaMilliseconds))) == .timedOut {
            logger.warning(
                "work on revoked partitions did not finish in time: their next owner does again what was not marked processed",
                metadata: ["kafka.partitions": "\(partitions)", "timeout": "\(handler.timeout)"])
        }
    }

    /// A group member's owned partitions are given up as lost (nothing more committed for them,
    /// their buffered messages dropped), and the caller told so; it waits for its next assignment.
    /// A replica keeps what it buffered: its next handle starts after it.
    func loseEverything() {
        guard let owned = machine.withLock({ $0.lostWithHandle }) else { return }
        _ = willRevoke(owned, lost: true)
        if !owned.isEmpty { didRevoke(owned) }
    }

    // MARK: Errors

    func clientError(_ error: KafkaError) {
        cluster.observe(error)
        if error.isFatal {
            // The poll loop sees it (rd_kafka_fatal_error) and replaces the handle.
            logger.error("fatal consumer error", metadata: ["kafka.error": "\(error)"])
        } else {
            logger.warning("consumer error", metadata: ["kafka.error": "\(error)"])
        }
    }

    func consumeError(_ error: KafkaError) {
        errorMetric.increment()
        logger.warning("consume error", metadata: ["kafka.error": "\(error)"])
    }

    // MARK: Buffer

    /// Hands a batch of messages (stamped with their assignment epoch) to the caller's loop. Poll thread only.
    func deliver(_ stamped: [KafkaConsumerEvent]) {
        contact()
        consumedMetric.increment(by: Int64(stamped.count))
        perform(machine.withLock { $0.deliver(stamped) })
    }

    /// Waits for buffered events; `nil` when the consumer finished (or the task was cancelled).
    func take(isolation actor: isolated (any Actor)?) async -> ConsumerMachine.Taken? {
        await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: ConsumerMachine.Waiter) in
                perform(machine.withLock { $0.take(continuation, cancelled: Task.isCancelled) })
            }
        } onCancel: {
            perform(machine.withLock { $0.cancelTake() })
        }
    }

    /// No more events after what is buffered. Poll thread only, after close.
    func finishEvents() {
        let resume = machine.withLock { $0.finish() }
        // A consumer that stopped reads nothing more: its series does not keep its last lag.
        lagGauge.record(0)
        perform(resume)
    }
}

// MARK: - Health, lag and recovery

extension ConsumerCore {
    /// The cluster answered (records fetched, a rebalance).
    func contact(at now: UInt64 = MonotonicTime.now()) {
        cluster.heard(at: now)
    }

    func health(now: UInt64 = MonotonicTime.now()) -> KafkaClientHealth {
        let (lastContact, loginRefused) = (cluster.last, cluster.loginRefused)
        return machine.withLock { machine in
            machine.healthSnapshot(lastContact: lastContact, loginRefused: loginRefused).health(now: now, policy: machine.policy)
        }
    }

    var fetchWait: Int { machine.withLock { $0.fetchWaitMilliseconds } }
    var recoveries: Int { machine.withLock { $0.recoveries } }

    func useFetchWait(milliseconds: Int, newHandle: Bool) {
        machine.withLock { $0.useFetchWait(milliseconds: milliseconds, newHandle: newHandle) }
    }

    /// A replacement of the handle begins; returns how many in a row this is. Poll thread.
    func beginRecovery(reason: KafkaError) -> Int { machine.withLock { $0.beginRecovery(reason: reason) } }
    func nextRecreation() -> ConsumerMachine.Recreation { machine.withLock { $0.nextRecreation() } }
    func recreationFailed() { machine.withLock { $0.recreationFailed() } }
    func recreated() { machine.withLock { $0.recreated() } }

    /// Looks at how far behind the end of its partitions the consumer is, every
    /// ``KafkaHealthPolicy/lagLookInterval``: the gauge, and a warning when it stops gaining on the end (a replica
    /// that does so long enough is not ready, ``KafkaHealthPolicy/fallingBehindAfter``). Poll thread.
    /// Returns the fetch wait to replace the handle with when the look finds the consumer starved
    /// (``ConsumerMachine/fetchWaitAfterStarving(at:clusterAnswers:)``): between looks there is nothing new to decide.
    func watchLag(_ client: RDKafkaClient, now: UInt64 = MonotonicTime.now()) -> Duration? {
        let (due, owned) = machine.withLock { ($0.lagLookDue(at: now), $0.owned) }
        guard due else { return nil }
        // The broker is asked what its fetch answers did not say only while it answers at all.
        let ask = clusterAnswers(at: now)
        let known = client.lag(owned, startingAt: startingOffsets(of: owned, client, asking: ask), askingTheBroker: ask)
        let answers = clusterAnswers(at: now)
        let look = machine.withLock { $0.noteLag(known: known, owned: owned, at: now, clusterAnswers: answers) }
        lagGauge.record(Double(look.records))
        if !look.wasStuck, let stuck = look.stuck {
            logger.warning(
                "the consumer is behind the end of its partitions and has not gained on it",
                metadata: [
                    "kafka.lag.records": "\(stuck.records)", "kafka.partitions": "\(owned.count)",
                    "seconds": "\(MonotonicTime.seconds(from: stuck.since, to: now))",
                ])
        } else if look.wasStuck, look.stuck == nil {
            logger.notice("the consumer gains on the end of its partitions again", metadata: ["kafka.lag.records": "\(look.records)"])
        }
        return look.longerFetchWait
    }

    /// The cluster answered within ``KafkaHealthPolicy/unreachableAfter``.
    private func clusterAnswers(at now: UInt64) -> Bool {
        let last = cluster.last
        let limit = machine.withLock { MonotonicTime.nanoseconds($0.policy.unreachableAfter) }
        return last > 0 && (now <= last || now - last <= limit)
    }

    /// Where a group member started reading partitions it has handed nothing of yet: their
    /// committed offsets, asked for once per assignment (a short request; the answer is kept until
    /// the partition is revoked). Without it a member the broker starves from its first fetch on
    /// would look behind by nothing.
    private func startingOffsets(of owned: [KafkaTopicPartition], _ client: RDKafkaClient, asking: Bool) -> [KafkaTopicPartition: Int64] {
        let (known, unasked) = machine.withLock { $0.startingOffsets(of: owned) }
        guard asking, !unasked.isEmpty, let answer = try? client.committedOffsets(unasked, timeoutMilliseconds: 1_000) else { return known }
        return machine.withLock { machine in
            machine.noteCommitted(answer)
            return machine.startingOffsets(of: owned).known
        }
    }
}
