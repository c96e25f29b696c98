/// A ``KafkaConsumer``'s whole Swift state as one value: its lifecycle, the partitions it owns
/// (each under an assignment epoch) with the offsets marked processed, the partitions paused for
/// backpressure, the bounded buffer between the poll thread and the caller's loop, the handle's
/// recoveries and the lag watch.
///
/// It lives under one lock (``ConsumerCore``) and knows nothing of librdkafka, threads or clocks:
/// every method is a transition that returns what the caller must do once the lock is released
/// (poll, store offsets, pause or resume fetching, recreate the handle, run the caller's
/// revocation handler, resume the waiting loop, close or abandon the handle). Time comes in as
/// ``MonotonicTime`` nanoseconds, so the transitions are tested without a broker.
struct ConsumerMachine {
    typealias Taken = (events: [KafkaConsumerEvent], generation: UInt64)
    /// The caller's loop, suspended until events arrive.
    typealias Waiter = CheckedContinuation<Taken?, Never>
    typealias LossHandler = @Sendable ([KafkaTopicPartition]) -> Void

    /// The caller's work to finish before partitions are revoked (``KafkaConsumer/onRevocation(timeout:_:)``).
    struct RevocationHandler: Sendable {
        var timeout: Duration
        var body: @Sendable ([KafkaTopicPartition]) async -> Void
    }

    enum Lifecycle: Equatable { case idle, running, finished }

    /// What the poll loop does next.
    enum Step: Equatable, Sendable {
        /// Store marked offsets, look at the lag, apply backpressure and read a batch.
        case poll
        /// librdkafka declared the handle unusable: give its partitions up as lost and make a new one.
        case recreate(after: KafkaError)
        /// Stop: ``Finish/close`` commits what was marked and leaves the group; ``Finish/abandon``
        /// leaves the handle as a killed process would.
        case finish(Finish)
    }

    enum Finish: Equatable, Sendable { case close, abandon }

    /// What the recovery after a fatal error does next.
    enum Recreation: Equatable, Sendable {
        /// Make a new handle, after waiting this long (zero: at once).
        case make(after: Duration)
        /// The consumer was stopped meanwhile: make none.
        case stop
    }

    /// What the poll loop does about a full (or drained) buffer.
    enum Backpressure: Equatable, Sendable {
        case none
        /// The buffer is full: wait briefly (``ConsumerCore/stallBeforePause``) for the caller's
        /// loop to take it, then ask again with `waited: true`.
        case waitForSpace
        /// The caller's loop stalled: stop fetching these partitions.
        case pause([KafkaTopicPartition])
        /// The caller's loop took half the buffer: fetch these partitions again.
        case resume([KafkaTopicPartition])
    }

    /// What must happen before partitions are revoked (outside the lock).
    enum RevocationWork: Sendable {
        case none
        /// The partitions were lost: tell the caller at once (``KafkaConsumer/onLoss(_:)``).
        case tellLoss(LossHandler)
        /// Run the caller's handler and wait for it, at most its timeout.
        case finishWork(RevocationHandler)
    }

    /// A suspended loop handed what it waited for, to resume outside the lock; the poll thread,
    /// if it waits for space, is woken too.
    struct Resume: Sendable {
        let waiter: Waiter?
        let value: Taken?
        let wakePollThread: Bool
    }

    /// What a look at the lag found.
    struct LagLook: Equatable, Sendable {
        /// Behind and not gaining beyond ``KafkaHealthPolicy/fallingBehindAfter``, before and after the look.
        var wasStuck: Bool
        var stuck: LagWatch.Behind?
        /// Records behind in all.
        var records: Int64
        /// The fetch wait to recreate the handle with: the broker starves the consumer.
        var longerFetchWait: Duration?
    }

    /// What this member knows of a partition it owns, under one assignment.
    struct PartitionMarks {
        var partition: KafkaTopicPartition
        /// The offset to commit (next to read), marked but not yet handed to librdkafka.
        var pending: Int64?
        /// The highest offset handed to librdkafka, so that a late mark never moves it back.
        var stored: Int64?
    }

    /// Replacements of the handle after fatal errors.
    struct Recovery {
        /// In a row, without a record or an assignment since.
        var consecutive = 0
        var total = 0
        /// The fatal error of the replacement under way (`nil`: none).
        var under: String?
        var lastReason: String?
        /// The replacement under way: its number in a row, and the handles it failed to make.
        var attempt = 0
        var failures = 0
    }

    let capacity: Int
    let inGroup: Bool
    let policy: KafkaHealthPolicy

    private(set) var lifecycle = Lifecycle.idle
    private(set) var stopRequested = false
    private(set) var abandonRequested = false
    private(set) var revocationHandler: RevocationHandler?
    private(set) var lossHandler: LossHandler?

    // Partitions. Every assignment of a partition gets a new epoch; messages carry the epoch they
    // were read under, so a mark finds its partition by one integer lookup, and a message read
    // under an earlier assignment finds nothing.
    private var byEpoch: [UInt64: PartitionMarks] = [:]
    var epochOf: [KafkaTopicPartition: UInt64] = [:]
    private var nextEpoch: UInt64 = 1
    /// Whether any partition has a pending mark.
    private var marksDirty = false
    /// Partitions being revoked while the caller finishes its work on them: their messages are
    /// not delivered any more, their marks still count.
    private var revoking: Set<KafkaTopicPartition> = []
    /// Partitions paused because the buffer was full.
    private(set) var paused: Set<KafkaTopicPartition> = []
    /// A group member's committed offsets at assignment, of the partitions it holds (-1: none).
    var committedAtAssignment: [KafkaTopicPartition: Int64] = [:]
    /// A group member that has not been given its partitions since it (re)joined.
    var awaitingAssignment: Bool

    // The buffer between the poll thread and the caller's loop.
    private var items: [KafkaConsumerEvent] = []
    private(set) var messageCount = 0
    private var waiter: Waiter?
    private var finished = false
    /// Bumped by every revocation, after it removed the revoked messages.
    private(set) var generation: UInt64 = 0
    /// The poll thread waits for the caller's loop to take the buffer.
    private var pollThreadWaiting = false
    private var iteratorClaimed = false

    var recovery = Recovery()

    /// How far behind the end of its partitions the consumer is, and whether it gains on it.
    var lag: LagWatch
    var lagLookedAt: UInt64 = 0
    let lagLookInterval: UInt64
    /// Records handed to the caller's buffer since the consumer started (the lag watch's progress).
    private(set) var consumed: UInt64 = 0
    /// The `fetch.wait.max.ms` of the current handle.
    var fetchWaitMilliseconds = 0

    init(capacity: Int, inGroup: Bool, policy: KafkaHealthPolicy) {
        self.capacity = capacity
        self.inGroup = inGroup
        self.policy = policy
        self.awaitingAssignment = inGroup
        self.lag = LagWatch(tolerance: policy.lagTolerance)
        self.lagLookInterval = MonotonicTime.nanoseconds(policy.lagLookInterval)
    }

    // MARK: Lifecycle

    mutating func start() -> Bool {
        guard lifecycle == .idle else { return false }
        lifecycle = .running
        return true
    }

    mutating func claimIterator() -> Bool {
        defer { iteratorClaimed = true }
        return !iteratorClaimed
    }

    mutating func requestStop() {
        stopRequested = true
    }

    /// Stop as a killed process would: no commit, no LeaveGroup.
    mutating func requestAbandon() {
        abandonRequested = true
        stopRequested = true
    }

    /// The poll loop's next step; `fatal` is the handle's fatal error, if it has one.
    func nextStep(fatal: KafkaError?) -> Step {
        if stopRequested { return .finish(abandonRequested ? .abandon : .close) }
        if let fatal { return .recreate(after: fatal) }
        return .poll
    }

    /// No more events after what is buffered.
    mutating func finish() -> Resume? {
        lifecycle = .finished
        finished = true
        return takeForWaiter()
    }

    mutating func setRevocationHandler(_ handler: RevocationHandler) { revocationHandler = handler }
    mutating func setLossHandler(_ handler: @escaping LossHandler) { lossHandler = handler }

    // MARK: Marks

    /// Marks `message` and every earlier one of its partition processed; `false` when the
    /// partition was revoked (or reassigned) since the message was read.
    mutating func mark(_ message: KafkaMessage) -> Bool {
        guard let index = byEpoch.index(forKey: message.assignmentEpoch) else { return false }
        let next = message.offset + 1
        let current = byEpoch.values[index].pending ?? byEpoch.values[index].stored ?? Int64.min
        if next > current {
            byEpoch.values[index].pending = next
            marksDirty = true
        }
        return true
    }

    /// The offsets marked since the last call, to hand to librdkafka (which commits them).
    mutating func takeMarkedOffsets() -> [KafkaTopicPartition: Int64] {
        guard marksDirty else { return [:] }
        marksDirty = false
        var pending: [KafkaTopicPartition: Int64] = [:]
        for index in byEpoch.indices {
            guard let offset = byEpoch.values[index].pending else { continue }
            pending[byEpoch.values[index].partition] = offset
            byEpoch.values[index].stored = offset
            byEpoch.values[index].pending = nil
        }
        return pending
    }

    /// The assignment epoch of each owned partition, for stamping a batch.
    var assignmentEpochs: [KafkaTopicPartition: UInt64] { epochOf }

    var owned: [KafkaTopicPartition] { Array(epochOf.keys) }

    /// The events whose partitions are still assigned under the same epoch and not being revoked
    /// (non-message events are kept).
    func stillAssigned(_ events: [KafkaConsumerEvent]) -> [KafkaConsumerEvent] {
        events.filter { event in
            guard case .message(let message) = event else { return true }
            return byEpoch[message.assignmentEpoch] != nil && !revoking.contains(message.topicPartition)
        }
    }

    // MARK: Backpressure

    /// Flow control between the poll thread and the caller's loop. A full buffer first waits
    /// briefly for the loop to take it (the normal case: the loop is just busy); if the loop
    /// stalls longer (`waited`), fetching of the owned partitions is paused and the poll loop goes
    /// on — rebalances, marks and the group's poll interval are served however slow the caller
    /// is — and resumed once the loop has taken half the buffer.
    mutating func backpressure(waited: Bool) -> Backpressure {
        if messageCount >= capacity {
            if waited {
                pollThreadWaiting = false
            } else if paused.isEmpty {
                guard !stopRequested else { return .none }
                pollThreadWaiting = true
                return .waitForSpace
            }
            guard !stopRequested else { return .none }
            let toPause = Set(epochOf.keys).subtracting(paused)
            paused.formUnion(toPause)
            return toPause.isEmpty ? .none : .pause(Array(toPause))
        }
        if waited { pollThreadWaiting = false }
        if !paused.isEmpty && messageCount <= capacity / 2 {
            let stillOwned = paused.intersection(epochOf.keys)
            paused.removeAll()
            return stillOwned.isEmpty ? .none : .resume(Array(stillOwned))
        }
        return .none
    }

    /// The poll thread, waiting for space, may go on: the loop took the buffer, or a stop was requested.
    var spaceOrStop: Bool { stopRequested || messageCount < capacity }

    // MARK: Rebalance

    /// Partitions were assigned: each gets a new epoch, starts unpaused (the rebalance callback
    /// resumes it in librdkafka; the poll loop pauses it again if the buffer is still full), and
    /// the caller gets ``KafkaConsumerEvent/partitionsAssigned(_:)``.
    mutating func assign(_ partitions: [KafkaTopicPartition]) -> Resume? {
        recovered()
        awaitingAssignment = false
        for tp in partitions {
            let epoch = nextEpoch
            nextEpoch &+= 1
            if let previous = epochOf.updateValue(epoch, forKey: tp) { byEpoch[previous] = nil }
            byEpoch[epoch] = PartitionMarks(partition: tp)
        }
        paused.subtract(partitions)
        return enqueue(.partitionsAssigned(partitions))
    }

    /// Partitions are about to be revoked: what the caller must do first. Revoked (not lost)
    /// partitions with a handler are ``revoking``: their buffered messages are dropped and no
    /// more delivered, their marks still count.
    mutating func beginRevocation(_ partitions: [KafkaTopicPartition], lost: Bool) -> RevocationWork {
        guard !partitions.isEmpty else { return .none }
        if lost { return lossHandler.map { .tellLoss($0) } ?? .none }
        guard let revocationHandler else { return .none }
        revoking.formUnion(partitions)
        dropBuffered(Set(partitions))
        return .finishWork(revocationHandler)
    }

    /// The partitions go: from here on their marks are refused and their buffered messages
    /// dropped. Returns the offsets marked and not yet stored, to store before the commit
    /// (none when lost: another member may own them already).
    mutating func endRevocation(_ partitions: [KafkaTopicPartition], lost: Bool) -> [KafkaTopicPartition: Int64] {
        var toStore: [KafkaTopicPartition: Int64] = [:]
        revoking.subtract(partitions)
        for tp in partitions {
            guard let epoch = epochOf.removeValue(forKey: tp) else { continue }
            if let offset = byEpoch.removeValue(forKey: epoch)?.pending { toStore[tp] = offset }
        }
        paused.subtract(partitions)
        for tp in partitions { committedAtAssignment[tp] = nil }
        // Lost: the group dropped this member; it is not ready until it rejoined and got partitions.
        if lost { awaitingAssignment = true }
        dropBuffered(Set(partitions))
        return lost ? [:] : toStore
    }

    /// The partitions were revoked (after the commit): the caller gets ``KafkaConsumerEvent/partitionsRevoked(_:)``.
    mutating func revoked(_ partitions: [KafkaTopicPartition]) -> Resume? {
        enqueue(.partitionsRevoked(partitions))
    }

    /// The partitions a fatal error makes this member give up: a group member's owned ones, lost
    /// even when there are none (it waits for the group again); `nil` for a replica, which keeps
    /// what it buffered (its next handle starts after it).
    var lostWithHandle: [KafkaTopicPartition]? { inGroup ? owned : nil }

    /// Drops the buffered messages of these partitions: they are never delivered.
    private mutating func dropBuffered(_ revoked: Set<KafkaTopicPartition>) {
        let before = items.count
        items.removeAll { event in
            if case .message(let message) = event { return revoked.contains(message.topicPartition) }
            return false
        }
        messageCount -= before - items.count
        generation &+= 1
    }

    // MARK: Buffer

    /// Hands a batch of messages (stamped with their assignment epoch) to the caller's loop.
    /// Never waits: ``backpressure(waited:)`` keeps the buffer near its capacity.
    mutating func deliver(_ stamped: [KafkaConsumerEvent]) -> Resume? {
        recovered()
        consumed &+= UInt64(stamped.count)
        if items.isEmpty {
            items = stamped
        } else {
            items.append(contentsOf: stamped)
        }
        messageCount += stamped.count
        return takeForWaiter()
    }

    private mutating func enqueue(_ event: KafkaConsumerEvent) -> Resume? {
        items.append(event)
        return takeForWaiter()
    }

    /// The caller's loop asks for events: handed at once (``Resume/waiter`` is `waiter`), or
    /// `nil` when `waiter` must wait for them.
    mutating func take(_ waiter: Waiter?, cancelled: Bool) -> Resume? {
        if !items.isEmpty || finished || cancelled {
            let (value, wake) = cancelled ? (nil, false) : takeAll()
            return Resume(waiter: waiter, value: value, wakePollThread: wake)
        }
        self.waiter = waiter
        return nil
    }

    /// The caller's loop was cancelled while it waited: resume it with nothing.
    mutating func cancelTake() -> Resume? {
        defer { waiter = nil }
        return waiter.map { Resume(waiter: $0, value: nil, wakePollThread: false) }
    }

    private mutating func takeForWaiter() -> Resume? {
        guard let waiter else { return nil }
        self.waiter = nil
        let (value, wake) = takeAll()
        return Resume(waiter: waiter, value: value, wakePollThread: wake)
    }

    /// Everything buffered with the current generation, or `nil` once finished and drained; and
    /// whether the poll thread waits for this.
    private mutating func takeAll() -> (Taken?, Bool) {
        if items.isEmpty && finished { return (nil, false) }
        defer {
            items = []
            messageCount = 0
            pollThreadWaiting = false
        }
        return ((items, generation), pollThreadWaiting)
    }
}
