import Dispatch
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// What a ``KafkaConsumer`` delivers, in order.
public enum KafkaConsumerEvent: Sendable {
    /// Partitions now belong to this member: rebuild their state before handling their messages
    /// (which follow this event).
    case partitionsAssigned([KafkaTopicPartition])
    /// A record.
    case message(KafkaMessage)
    /// Partitions left this member: what was marked processed is committed; drop their state.
    /// Messages of these partitions not yet handled are not delivered any more.
    case partitionsRevoked([KafkaTopicPartition])
}

/// A consumer-group member with at-least-once delivery.
///
/// Offsets are stored only when the caller marks a message processed
/// (``markProcessed(_:)``, which covers every earlier message of that partition too); librdkafka
/// commits stored offsets every `auto.commit.interval.ms`, and synchronously when partitions are
/// revoked, so that the next owner starts right after the last processed message. Assignment and
/// revocation arrive in ``events`` between the messages. ``run()`` drives librdkafka on a thread
/// of its own; when it stops (graceful shutdown, cancellation, ``shutdown()`` or the caller
/// leaving its loop over ``events``), the consumer commits and leaves the group at once.
///
/// ```swift
/// let consumer = try KafkaConsumer(configuration: .init(bootstrapServers: servers, groupID: "g", topics: ["t"]), logger: logger)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await consumer.run() }
///     for await event in consumer.events {
///         if case .message(let message) = event {
///             try await handle(message)
///             consumer.markProcessed(message)
///         }
///     }
/// }
/// ```
public final class KafkaConsumer: Service, Sendable {
    private let client: RDKafkaClient
    private let core: ConsumerCore
    private let configuration: KafkaConsumerConfiguration
    private let logger: Logger

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws(KafkaError) {
        let core = ConsumerCore(capacity: configuration.bufferCapacity, logger: logger)
        self.core = core
        self.configuration = configuration
        self.logger = logger
        self.client = try RDKafkaClient(
            kind: .consumer,
            properties: try configuration.librdkafkaProperties(),
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: nil,
                onError: { error in core.clientError(error) },
                rebalance: RDKafkaRebalanceHooks(
                    didAssign: { core.didAssign($0) },
                    willRevoke: { core.willRevoke($0, lost: $1) },
                    didRevoke: { core.didRevoke($0) })))
    }

    /// Assignments, messages and revocations, in order. Iterate it once; leaving the loop stops
    /// the consumer.
    public var events: KafkaConsumerEvents { KafkaConsumerEvents(core: core) }

    /// Only the messages of ``events`` (for callers that keep no per-partition state).
    public var messages: KafkaConsumerMessages { KafkaConsumerMessages(events: events) }

    /// Marks `message`, and every earlier message of its partition, processed: its offset will be
    /// committed. Returns `false` when the partition was revoked since the message was read; the
    /// message will then be delivered to the partition's next owner (at-least-once).
    @discardableResult
    public func markProcessed(_ message: KafkaMessage) -> Bool {
        core.mark(message)
    }

    /// Joins the group (subscribes) and drives librdkafka until shutdown, then commits what was
    /// marked and leaves the group. A consumer that is never run never joins its group.
    public func run() async throws {
        guard core.start() else {
            throw KafkaError(code: .shutdown, message: "KafkaConsumer.run() may be called once")
        }
        // Subscribing makes librdkafka join the group, which needs the poll loop to answer
        // rebalances: a member that joined without polling would hold partitions hostage.
        try client.subscribe(configuration.topics)
        let client = self.client
        let core = self.core
        let batchSize = configuration.batchSize
        let logger = self.logger
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await DedicatedThread.run(name: "islet-kafka-consumer") {
                    let reader = RDKafkaBatchReader(capacity: batchSize)
                    while !core.stopRequested {
                        core.storeMarkedOffsets(into: client)
                        var batch: [KafkaConsumerEvent] = []
                        // Epochs are read after the call: rebalances happen inside it.
                        let errors = reader.read(from: client, timeoutMilliseconds: 100, into: &batch) { core.assignmentEpochs() }
                        for error in errors {
                            core.consumeError(error)
                        }
                        if !batch.isEmpty {
                            core.deliver(batch)
                        }
                    }
                    if core.abandonRequested {
                        core.finishEvents()
                        return
                    }
                    core.storeMarkedOffsets(into: client)
                    if let error = client.closeConsumer() {
                        logger.warning("consumer close reported an error", metadata: ["kafka.error": "\(error)"])
                    }
                    core.finishEvents()
                }
            } onGracefulShutdown: {
                self.shutdown()
            }
        } onCancel: {
            self.shutdown()
        }
        if core.abandonRequested {
            // rd_kafka_destroy joins librdkafka's threads: not on the cooperative pool.
            await DedicatedThread.run(name: "islet-kafka-destroy") { client.abandon() }
        }
        if let fatal = core.fatalError {
            throw fatal
        }
    }

    /// Asks ``run()`` to commit, leave the group and return.
    public func shutdown() {
        core.requestStop()
        client.wakeUp()
    }

    /// The group's committed offsets (the next offset to read) for these partitions.
    public func committedOffsets(for partitions: [KafkaTopicPartition], timeout: Duration = .seconds(10)) async throws
        -> [KafkaTopicPartition: Int64?]
    {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        return try await DedicatedThread.run(name: "islet-kafka-committed") {
            try client.committedOffsets(partitions, timeoutMilliseconds: timeoutMilliseconds)
        }
    }

    /// Stops like a process killed with SIGKILL: no commit, no LeaveGroup. The group keeps this
    /// member until its session times out. For tests of crash recovery only; ``run()`` returns.
    public func simulateCrash() {
        core.requestAbandon()
        client.wakeUp()
    }
}

/// Assignments, messages and revocations of a ``KafkaConsumer``, in order.
public struct KafkaConsumerEvents: AsyncSequence, Sendable {
    public typealias Element = KafkaConsumerEvent
    public typealias Failure = Never
    let core: ConsumerCore

    public func makeAsyncIterator() -> Iterator {
        Iterator(state: IteratorState(core: core))
    }

    public struct Iterator: AsyncIteratorProtocol {
        public typealias Failure = Never
        let state: IteratorState

        public mutating func next() async -> KafkaConsumerEvent? {
            await state.next(isolation: nil)
        }

        /// Runs on the caller's actor: taking the next buffered event needs no executor hop.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> KafkaConsumerEvent? {
            await state.next(isolation: actor)
        }
    }

    /// The iterator's local batch. Not shared: an iterator is used by one task at a time.
    final class IteratorState {
        let core: ConsumerCore
        var batch: [KafkaConsumerEvent] = []
        var index = 0
        var generation: UInt64

        init(core: ConsumerCore) {
            self.core = core
            self.generation = core.generation
        }

        deinit {
            // Leaving the loop early must not leave a group member behind.
            core.requestStop()
        }

        func next(isolation actor: isolated (any Actor)?) async -> KafkaConsumerEvent? {
            while true {
                if index < batch.count {
                    let current = core.generation
                    if current != generation {
                        // A revocation happened: drop messages of partitions this member lost.
                        generation = current
                        batch = core.stillAssigned(Array(batch[index...]))
                        index = 0
                        continue
                    }
                    defer { index += 1 }
                    return batch[index]
                }
                guard let taken = await core.take(isolation: actor) else { return nil }
                batch = taken
                index = 0
                generation = core.generation
                if batch.isEmpty { continue }
                // Revocations enqueued after these items bump the generation; filtering above copes.
            }
        }
    }
}

/// Only the messages of a consumer's events.
public struct KafkaConsumerMessages: AsyncSequence, Sendable {
    public typealias Element = KafkaMessage
    public typealias Failure = Never
    let events: KafkaConsumerEvents

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: events.makeAsyncIterator())
    }

    public struct Iterator: AsyncIteratorProtocol {
        public typealias Failure = Never
        var base: KafkaConsumerEvents.Iterator

        public mutating func next() async -> KafkaMessage? {
            await next(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> KafkaMessage? {
            while let event = await base.next(isolation: actor) {
                if case .message(let message) = event { return message }
            }
            return nil
        }
    }
}

/// The consumer's Swift state: which partitions are assigned (and since when), the offsets
/// marked processed, and the bounded buffer between the poll thread and the caller's loop.
final class ConsumerCore: Sendable {
    /// What this member knows of a partition it owns, under one assignment.
    private struct PartitionMarks {
        var partition: KafkaTopicPartition
        /// The offset to commit (next to read), marked but not yet handed to librdkafka.
        var pending: Int64?
        /// The highest offset handed to librdkafka, so that a late mark never moves it back.
        var stored: Int64?
    }

    /// Every assignment of a partition gets a new epoch; messages carry the epoch they were read
    /// under, so a mark finds its partition by one integer lookup, and a message read under an
    /// earlier assignment finds nothing.
    private struct Marks {
        var byEpoch: [UInt64: PartitionMarks] = [:]
        var epochOf: [KafkaTopicPartition: UInt64] = [:]
        var nextEpoch: UInt64 = 1
        /// Whether any partition has a pending mark.
        var dirty = false
    }

    private struct Buffer {
        var items: [KafkaConsumerEvent] = []
        var messageCount = 0
        var waiter: CheckedContinuation<[KafkaConsumerEvent]?, Never>?
        var pollThreadWaiting = false
        var finished = false
    }

    private enum Lifecycle { case idle, running }

    private let marks = Mutex(Marks())
    private let buffer = Mutex(Buffer())
    private let lifecycle = Mutex(Lifecycle.idle)
    private let space = DispatchSemaphore(value: 0)
    private let stop = Atomic<Bool>(false)
    private let abandon = Atomic<Bool>(false)
    private let generationCounter = Atomic<UInt64>(0)
    private let fatal = Mutex<KafkaError?>(nil)
    private let capacity: Int
    private let logger: Logger
    private let consumedMetric = Counter(label: "islet_kafka_consumer_messages_total")
    private let errorMetric = Counter(label: "islet_kafka_consumer_errors_total")

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    var generation: UInt64 { generationCounter.load(ordering: .acquiring) }
    var stopRequested: Bool { stop.load(ordering: .acquiring) }
    var abandonRequested: Bool { abandon.load(ordering: .acquiring) }
    var fatalError: KafkaError? { fatal.withLock { $0 } }

    func start() -> Bool {
        lifecycle.withLock { state in
            guard state == .idle else { return false }
            state = .running
            return true
        }
    }

    func requestStop() {
        stop.store(true, ordering: .releasing)
        space.signal()
    }

    func requestAbandon() {
        abandon.store(true, ordering: .releasing)
        requestStop()
    }

    // MARK: Marks (any thread)

    func mark(_ message: KafkaMessage) -> Bool {
        marks.withLock { marks in
            guard let index = marks.byEpoch.index(forKey: message.assignmentEpoch) else { return false }
            let next = message.offset + 1
            let current = marks.byEpoch.values[index].pending ?? marks.byEpoch.values[index].stored ?? Int64.min
            if next > current {
                marks.byEpoch.values[index].pending = next
                marks.dirty = true
            }
            return true
        }
    }

    /// Hands marked offsets to librdkafka. Poll thread only (so it never races a rebalance).
    func storeMarkedOffsets(into client: RDKafkaClient) {
        let pending = marks.withLock { marks -> [KafkaTopicPartition: Int64] in
            guard marks.dirty else { return [:] }
            marks.dirty = false
            var pending: [KafkaTopicPartition: Int64] = [:]
            for index in marks.byEpoch.indices {
                guard let offset = marks.byEpoch.values[index].pending else { continue }
                pending[marks.byEpoch.values[index].partition] = offset
                marks.byEpoch.values[index].stored = offset
                marks.byEpoch.values[index].pending = nil
            }
            return pending
        }
        guard !pending.isEmpty else { return }
        if let error = client.storeOffsets(pending) {
            logger.debug("storing marked offsets failed", metadata: ["kafka.error": "\(error)"])
        }
    }

    /// The assignment epoch of each owned partition, for stamping a batch. Poll thread.
    func assignmentEpochs() -> [KafkaTopicPartition: UInt64] {
        marks.withLock { $0.epochOf }
    }

    // MARK: Rebalance (poll thread, inside librdkafka's rebalance callback)

    func didAssign(_ partitions: [KafkaTopicPartition]) {
        marks.withLock { marks in
            for tp in partitions {
                let epoch = marks.nextEpoch
                marks.nextEpoch &+= 1
                if let previous = marks.epochOf.updateValue(epoch, forKey: tp) { marks.byEpoch[previous] = nil }
                marks.byEpoch[epoch] = PartitionMarks(partition: tp)
            }
        }
        enqueue(.partitionsAssigned(partitions))
    }

    func willRevoke(_ partitions: [KafkaTopicPartition], lost: Bool) -> [KafkaTopicPartition: Int64] {
        let revoked = Set(partitions)
        // From here on marks of these partitions are refused and their buffered messages dropped.
        let toStore = marks.withLock { marks -> [KafkaTopicPartition: Int64] in
            var toStore: [KafkaTopicPartition: Int64] = [:]
            for tp in partitions {
                guard let epoch = marks.epochOf.removeValue(forKey: tp) else { continue }
                if let offset = marks.byEpoch.removeValue(forKey: epoch)?.pending { toStore[tp] = offset }
            }
            return toStore
        }
        generationCounter.wrappingAdd(1, ordering: .releasing)
        buffer.withLock { buffer in
            let before = buffer.items.count
            buffer.items.removeAll { event in
                if case .message(let message) = event { return revoked.contains(message.topicPartition) }
                return false
            }
            buffer.messageCount -= before - buffer.items.count
        }
        return lost ? [:] : toStore
    }

    func didRevoke(_ partitions: [KafkaTopicPartition]) {
        enqueue(.partitionsRevoked(partitions))
    }

    /// The events whose partitions are still assigned (non-message events are kept).
    func stillAssigned(_ events: [KafkaConsumerEvent]) -> [KafkaConsumerEvent] {
        marks.withLock { marks in
            events.filter { event in
                guard case .message(let message) = event else { return true }
                return marks.byEpoch[message.assignmentEpoch] != nil
            }
        }
    }

    // MARK: Errors

    func clientError(_ error: KafkaError) {
        if error.isFatal {
            logger.error("fatal consumer error: the consumer stops", metadata: ["kafka.error": "\(error)"])
            fatal.withLock { if $0 == nil { $0 = error } }
            requestStop()
        } else {
            logger.warning("consumer error", metadata: ["kafka.error": "\(error)"])
        }
    }

    func consumeError(_ error: KafkaError) {
        errorMetric.increment()
        logger.warning("consume error", metadata: ["kafka.error": "\(error)"])
    }

    // MARK: Buffer

    /// Hands a batch of messages (stamped with their assignment epoch) to the caller's loop,
    /// waiting while the buffer is full. Poll thread only.
    func deliver(_ stamped: [KafkaConsumerEvent]) {
        consumedMetric.increment(by: Int64(stamped.count))
        while !stopRequested {
            enum Action { case appended(CheckedContinuation<[KafkaConsumerEvent]?, Never>?), wait }
            let action = buffer.withLock { buffer -> Action in
                guard buffer.messageCount < capacity else {
                    buffer.pollThreadWaiting = true
                    return .wait
                }
                if buffer.items.isEmpty {
                    buffer.items = stamped
                } else {
                    buffer.items.append(contentsOf: stamped)
                }
                buffer.messageCount += stamped.count
                return .appended(takeWaiter(&buffer))
            }
            switch action {
            case .appended(let waiter):
                waiter?.resume(returning: takeAll())
                return
            case .wait:
                _ = space.wait(timeout: .now() + .milliseconds(100))
            }
        }
    }

    /// Appends an event regardless of capacity (rebalance events are few). Poll thread only.
    private func enqueue(_ event: KafkaConsumerEvent) {
        let waiter = buffer.withLock { buffer in
            buffer.items.append(event)
            return takeWaiter(&buffer)
        }
        waiter?.resume(returning: takeAll())
    }

    private func takeWaiter(_ buffer: inout Buffer) -> CheckedContinuation<[KafkaConsumerEvent]?, Never>? {
        defer { buffer.waiter = nil }
        return buffer.waiter
    }

    /// Everything buffered (possibly empty), or `nil` once finished and drained.
    private func takeAll() -> [KafkaConsumerEvent]? {
        let (items, wakePollThread) = buffer.withLock { buffer -> ([KafkaConsumerEvent]?, Bool) in
            if buffer.items.isEmpty && buffer.finished { return (nil, false) }
            defer {
                buffer.items.removeAll(keepingCapacity: false)
                buffer.messageCount = 0
                buffer.pollThreadWaiting = false
            }
            return (buffer.items, buffer.pollThreadWaiting)
        }
        if wakePollThread { space.signal() }
        return items
    }

    /// Waits for buffered events; `nil` when the consumer finished (or the task was cancelled).
    func take(isolation actor: isolated (any Actor)?) async -> [KafkaConsumerEvent]? {
        await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<[KafkaConsumerEvent]?, Never>) in
                enum Action { case resume([KafkaConsumerEvent]?, wake: Bool), suspended }
                let action = buffer.withLock { buffer -> Action in
                    if !buffer.items.isEmpty {
                        let items = buffer.items
                        let wake = buffer.pollThreadWaiting
                        buffer.items.removeAll(keepingCapacity: false)
                        buffer.messageCount = 0
                        buffer.pollThreadWaiting = false
                        return .resume(items, wake: wake)
                    }
                    if buffer.finished || Task.isCancelled { return .resume(nil, wake: false) }
                    buffer.waiter = continuation
                    return .suspended
                }
                if case .resume(let items, let wake) = action {
                    if wake { space.signal() }
                    continuation.resume(returning: items)
                }
            }
        } onCancel: {
            let waiter = buffer.withLock { takeWaiter(&$0) }
            waiter?.resume(returning: nil)
        }
    }

    /// No more events after what is buffered. Poll thread only, after close.
    func finishEvents() {
        let waiter = buffer.withLock { buffer in
            buffer.finished = true
            return takeWaiter(&buffer)
        }
        waiter?.resume(returning: takeAll())
    }
}
