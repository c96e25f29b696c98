import Dispatch
import Foundation
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
    /// A replica (``KafkaConsumerConfiguration/Membership/replica``) read everything the partition
    /// held: it is caught up. Comes again each time new records were read to the end.
    case partitionEnd(KafkaTopicPartition)
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
    /// The librdkafka handle; replaced when librdkafka declares it unusable (a fatal error).
    private let current: CurrentClient
    private let core: ConsumerCore
    private let configuration: KafkaConsumerConfiguration
    private let properties: [String: String]
    private let logger: Logger

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws(KafkaError) {
        let core = ConsumerCore(
            capacity: configuration.bufferCapacity, inGroup: configuration.membership == .group, policy: configuration.health,
            clientID: configuration.clientID, topics: configuration.topics, logger: logger)
        self.core = core
        self.configuration = configuration
        self.logger = logger
        let properties = try configuration.librdkafkaProperties()
        self.properties = properties
        self.current = CurrentClient(try Self.makeClient(properties: properties, core: core, logger: logger))
    }

    private static func makeClient(properties: [String: String], core: ConsumerCore, logger: Logger) throws(KafkaError) -> RDKafkaClient {
        try RDKafkaClient(
            kind: .consumer,
            properties: properties,
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: nil,
                onError: { error in core.clientError(error) },
                rebalance: RDKafkaRebalanceHooks(
                    didAssign: { core.didAssign($0) },
                    willRevoke: { core.willRevoke($0, lost: $1) },
                    didRevoke: { core.didRevoke($0) })))
    }

    private var client: RDKafkaClient { current.client }

    /// Assignments, messages and revocations, in order. Iterate it once; leaving the loop stops
    /// the consumer.
    public var events: KafkaConsumerEvents { KafkaConsumerEvents(core: core) }

    /// Only the messages of ``events`` (for callers that keep no per-partition state).
    public var messages: KafkaConsumerMessages { KafkaConsumerMessages(events: events) }

    /// Marks `message`, and every earlier message of its partition, processed: its offset will be
    /// committed. Returns `false` when the partition was revoked since the message was read; the
    /// message will then be delivered to the partition's next owner (at-least-once).
    ///
    /// Kafka commits a position, not a set: marking a message says that all before it in its
    /// partition are done. A loop that keeps several messages of a partition in flight must mark
    /// them in order, only once every earlier one has finished.
    @discardableResult
    public func markProcessed(_ message: KafkaMessage) -> Bool {
        core.mark(message)
    }

    /// Joins the group (subscribes) and drives librdkafka until shutdown, then commits what was
    /// marked and leaves the group. A consumer that is never run never joins its group. A graceful
    /// shutdown of the service group stops it at once.
    public func run() async throws {
        try await run(stoppingOnGracefulShutdown: true)
    }

    /// ``run()``, for a service that must finish its work in flight before the consumer commits
    /// and leaves the group: with `false`, graceful shutdown does not stop the consumer; the
    /// service calls ``shutdown()`` once it is done. Cancellation still stops it.
    public func run(stoppingOnGracefulShutdown: Bool) async throws {
        guard core.start() else {
            throw KafkaError(code: .shutdown, message: "KafkaConsumer.run() may be called once")
        }
        let core = self.core
        let topics = configuration.topics
        let membership = configuration.membership
        let replicaPartitions = configuration.replicaPartitions
        let replicaSince = configuration.replicaSince.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded(.down)) }
        let replicaStartOffsets = configuration.replicaStartOffsets ?? [:]
        let replicaStartPositions = configuration.replicaStartPositions ?? [:]
        let batchSize = configuration.batchSize
        let pollMilliseconds = Int32(clamping: configuration.pollTimeout.components.seconds * 1_000 + configuration.pollTimeout.components.attoseconds / 1_000_000_000_000_000)
        let logger = self.logger
        let health = configuration.health
        let properties = self.properties
        let current = self.current
        let loop: @Sendable () async -> KafkaError? = {
            await DedicatedThread.run(name: "islet-kafka-consumer") { () -> KafkaError? in
                /// Where a replica goes on after its handle was replaced: the next offset of each partition.
                var positions = replicaStartPositions
                /// The handle's properties: a starved consumer's next handle fetches with a longer wait.
                var properties = properties
                core.useFetchWait(milliseconds: Self.fetchWaitMilliseconds(properties), newHandle: false)
                // Subscribing makes librdkafka join the group, which needs this loop to answer
                // rebalances: a member that joined without polling would hold partitions hostage.
                func join(_ client: RDKafkaClient) throws(KafkaError) {
                    switch membership {
                    case .group:
                        try client.subscribe(topics)
                    case .replica:
                        // No group, no rebalances: the whole topics, assigned once, from the start
                        // (or, for a replaced handle, from where the old one stopped).
                        core.didAssign(try client.assignReplica(
                            topics, partitions: replicaPartitions, sinceMilliseconds: replicaSince, startOffsets: replicaStartOffsets,
                            resumeAt: positions))
                    }
                }
                /// A new handle made with `properties`, joined as the first one was.
                func joined(_ properties: [String: String]) throws(KafkaError) -> RDKafkaClient {
                    let client = try Self.makeClient(properties: properties, core: core, logger: logger)
                    try join(client)
                    return client
                }
                var client = current.client
                do throws(KafkaError) {
                    try join(client)
                } catch {
                    core.finishEvents()
                    return error
                }
                let reader = RDKafkaBatchReader(capacity: batchSize)
                while !core.stopRequested {
                    if let fatal = client.fatalError() {
                        guard let replacement = Self.replace(client, after: fatal, core: core, health: health, logger: logger, current: current, make: {
                            () throws(KafkaError) -> RDKafkaClient in try joined(properties)
                        }) else { break }
                        client = replacement
                        continue
                    }
                    core.storeMarkedOffsets(into: client)
                    if let wait = core.watchLag(client) {
                        guard let replacement = Self.lengthenFetchWait(
                            of: client, to: wait, properties: &properties, core: core, health: health, logger: logger, current: current, make: joined
                        ) else { break }
                        client = replacement
                        continue
                    }
                    // A full buffer pauses fetching rather than this loop: rebalances and the
                    // group's poll interval keep being served while the caller catches up.
                    core.applyBackpressure(client)
                    var batch: [KafkaConsumerEvent] = []
                    // Epochs are read after the call: rebalances happen inside it.
                    let errors = reader.read(from: client, timeoutMilliseconds: pollMilliseconds, into: &batch) { core.assignmentEpochs() }
                    for error in errors {
                        core.consumeError(error)
                    }
                    if !batch.isEmpty {
                        if membership == .replica {
                            for case .message(let message) in batch { positions[message.topicPartition] = message.offset + 1 }
                        }
                        core.deliver(batch)
                    }
                }
                if core.stopRequested && client.isAbandoned {
                    // Stopped while its replacement was being made: nothing left to close.
                    core.finishEvents()
                    return nil
                }
                if core.abandonRequested {
                    core.finishEvents()
                    return nil
                }
                core.storeMarkedOffsets(into: client)
                if let error = client.closeConsumer() {
                    logger.warning("consumer close reported an error", metadata: ["kafka.error": "\(error)"])
                }
                core.finishEvents()
                return nil
            }
        }
        let probe = Task { [configuration] in
            await core.cluster.probe(policy: configuration.health, while: { !core.stopRequested }) { client }
        }
        defer { probe.cancel() }
        let subscribeError: KafkaError? = await withTaskCancellationHandler {
            if stoppingOnGracefulShutdown {
                await withGracefulShutdownHandler(operation: loop, onGracefulShutdown: { self.shutdown() })
            } else {
                await loop()
            }
        } onCancel: {
            self.shutdown()
        }
        if let subscribeError {
            throw subscribeError
        }
        if core.abandonRequested {
            // rd_kafka_destroy joins librdkafka's threads: not on the cooperative pool.
            let client = self.client
            await DedicatedThread.run(name: "islet-kafka-destroy") { client.abandon() }
        }
    }

    /// Replaces `old`, which librdkafka declared unusable (a fatal error: the member was fenced,
    /// say). A group member's partitions are given up as lost — nothing more is committed for
    /// them, their buffered messages are dropped and the caller gets
    /// ``KafkaConsumerEvent/partitionsRevoked(_:)`` — the old handle is destroyed without closing
    /// (it can neither commit nor leave the group), and a new one joins as a new member (a replica
    /// goes on after the last record it buffered),
    /// after a backoff when this is not the first replacement in a row. Returns the new handle,
    /// or `nil` when the consumer was stopped meanwhile. Poll thread only.
    private static func replace(
        _ old: RDKafkaClient, after reason: KafkaError, core: ConsumerCore, health: KafkaHealthPolicy, logger: Logger,
        current: CurrentClient, make: () throws(KafkaError) -> RDKafkaClient
    ) -> RDKafkaClient? {
        let attempt = core.beginRecovery(reason: reason)
        logger.error(
            "the Kafka consumer cannot go on: giving up its partitions and joining again with a new handle",
            metadata: ["kafka.error": "\(reason)", "kafka.recovery": "\(attempt)"])
        core.loseEverything()
        old.abandon()
        var failures = 0
        while !core.stopRequested {
            let backoff = health.backoff(beforeRecovery: attempt + failures)
            if backoff > .zero && !core.sleep(backoff) { return nil }
            do {
                let client = try make()
                current.client = client
                core.endRecovery(joined: true)
                logger.notice("the Kafka consumer was recreated", metadata: ["kafka.recovery": "\(attempt)"])
                return client
            } catch {
                logger.error("recreating the Kafka consumer failed", metadata: ["kafka.error": "\(error)"])
                failures += 1
                core.countFailedRecovery()
            }
        }
        return nil
    }

    /// Replaces a starved consumer's handle (``ConsumerCore/fetchWaitAfterStarving(now:)``) by
    /// one fetching with `wait`: the old one commits what was marked and leaves (a group member's
    /// partitions are revoked as in any rebalance, and the group assigns them again; a replica goes
    /// on where it stopped). If the new handle cannot be made, the recovery after a fatal error
    /// takes over (with the longer wait).
    private static func lengthenFetchWait(
        of old: RDKafkaClient, to wait: Duration, properties: inout [String: String], core: ConsumerCore, health: KafkaHealthPolicy,
        logger: Logger, current: CurrentClient, make: ([String: String]) throws(KafkaError) -> RDKafkaClient
    ) -> RDKafkaClient? {
        let milliseconds = Int(wait.librdkafkaMilliseconds)
        logger.warning(
            "the broker answers the consumer's fetches with nothing while it is behind: fetching with a longer wait from now on",
            metadata: ["kafka.fetch.wait.ms": "\(milliseconds)", "kafka.fetch.wait.ms.before": "\(fetchWaitMilliseconds(properties))"])
        properties["fetch.wait.max.ms"] = "\(milliseconds)"
        core.storeMarkedOffsets(into: old)
        if let error = old.closeConsumer() {
            logger.warning("consumer close reported an error", metadata: ["kafka.error": "\(error)"])
        }
        core.useFetchWait(milliseconds: milliseconds, newHandle: true)
        do {
            let client = try make(properties)
            current.client = client
            return client
        } catch {
            let properties = properties
            return replace(old, after: error, core: core, health: health, logger: logger, current: current, make: { () throws(KafkaError) in
                try make(properties)
            })
        }
    }

    /// The `fetch.wait.max.ms` a handle made with `properties` fetches with (librdkafka's default: 500).
    static func fetchWaitMilliseconds(_ properties: [String: String]) -> Int {
        properties["fetch.wait.max.ms"].flatMap { Int($0) } ?? 500
    }

    /// What the consumer can do now (for `/health`): ready while the cluster answers it and — in a
    /// group — the group gave it its partitions (possibly none); not ready while its handle is
    /// being replaced after a fatal error; `failed` after ``KafkaHealthPolicy/maximumRecoveries``
    /// replacements in a row without a record or an assignment between them (a restart is due).
    public var health: KafkaClientHealth { core.health() }

    /// The `fetch.wait.max.ms` the consumer fetches with now: the configured one, or a longer one
    /// after its broker starved it (``KafkaHealthPolicy/longestFetchWait``).
    public var fetchWait: Duration { .milliseconds(core.fetchWait) }

    /// How many times the handle was replaced after a fatal error.
    public var recoveries: Int { core.recoveries }

    /// Raises a fabricated fatal error in librdkafka (`rd_kafka_test_fatal_error`), as a fenced
    /// member would get one. Tests only.
    public func simulateFatalError(reason: String) {
        let client = self.client
        client.raiseFatalErrorForTesting(reason: reason)
        client.wakeUp()
    }

    /// Tells the caller, synchronously and at once, that partitions were lost — the group gave them
    /// to others without this member's revocation handler (its session expired, it was fenced,
    /// its handle replaced) — before ``KafkaConsumerEvent/partitionsRevoked(_:)`` reaches its
    /// loop, which may be busy with a record: work it holds of theirs must stop now, another
    /// member may be doing it. `handler` runs on the poll thread and must not block. Set it
    /// before ``run()``.
    public func onLoss(_ handler: @escaping @Sendable ([KafkaTopicPartition]) -> Void) {
        core.setLossHandler(handler)
    }

    /// Whether `message`'s partition is still this consumer's, under the assignment it was read
    /// in, and not being revoked: work on it that waits (a read before it is handled) stops when
    /// it is not.
    public func isCurrent(_ message: KafkaMessage) -> Bool {
        !core.stillAssigned([.message(message)]).isEmpty
    }

    /// Lets the caller finish its work on partitions before they are revoked: `handler` is called
    /// with the partitions about to go (by a rebalance, or by the close at shutdown), after their
    /// buffered messages were dropped and before their marked offsets are committed; librdkafka
    /// waits for it, at most `timeout`. What it marks processed meanwhile is committed, so the
    /// partitions' next owner starts after it: work in flight (a push sent, its outcome not yet
    /// written) is finished here instead of done again there. The handler should stop starting
    /// new work on those partitions (messages already on their way to the caller's loop still
    /// arrive) and return once the work under way is finished. Not called when the partitions
    /// were lost (the group moved them on already: there is nothing to commit). Set it before
    /// ``run()``.
    public func onRevocation(timeout: Duration, _ handler: @escaping @Sendable ([KafkaTopicPartition]) async -> Void) {
        core.setRevocationHandler(.init(timeout: timeout, body: handler))
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
            // A handle replaced meanwhile (a fatal error) is not asked; the caller may ask again.
            guard let offsets = try client.borrowing({ () throws(KafkaError) in try client.committedOffsets(partitions, timeoutMilliseconds: timeoutMilliseconds) })
            else { throw KafkaError.shutdown("the consumer's handle was destroyed") }
            return offsets
        }
    }

    /// Stops like a process killed with SIGKILL: no commit, no LeaveGroup. The group keeps this
    /// member until its session times out. For tests of crash recovery only; ``run()`` returns.
    public func simulateCrash() {
        core.requestAbandon()
        client.wakeUp()
    }
}

/// The consumer's librdkafka handle, which the poll thread replaces after a fatal error.
final class CurrentClient: Sendable {
    private let slot: Mutex<RDKafkaClient>
    init(_ client: RDKafkaClient) { slot = Mutex(client) }
    var client: RDKafkaClient {
        get { slot.withLock { $0 } }
        set { slot.withLock { $0 = newValue } }
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
            precondition(
                core.claimIterator(),
                "a KafkaConsumer's events can be iterated once: use one loop over events, messages or decoded(as:)")
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
                // The generation comes with the items, read under the same lock that a revocation
                // takes to filter the buffer and bump it: any later revocation is noticed above.
                guard let (taken, takenGeneration) = await core.take(isolation: actor) else { return nil }
                batch = taken
                index = 0
                generation = takenGeneration
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
        /// Partitions being revoked while the caller finishes its work on them: their messages are
        /// not delivered any more, their marks still count.
        var revoking: Set<KafkaTopicPartition> = []
    }

    private struct Buffer {
        var items: [KafkaConsumerEvent] = []
        var messageCount = 0
        var waiter: CheckedContinuation<([KafkaConsumerEvent], UInt64)?, Never>?
        var finished = false
        /// Bumped (under this lock) by every revocation, after it removed the revoked messages.
        var generation: UInt64 = 0
        /// The poll thread waits for the caller's loop to take the buffer.
        var pollThreadWaiting = false
        var iteratorClaimed = false
    }

    private enum Lifecycle { case idle, running, finished }

    /// Replacements of the handle after fatal errors.
    private struct Recovery {
        /// In a row, without a record or an assignment since.
        var consecutive = 0
        var total = 0
        /// The fatal error of the replacement under way (`nil`: none).
        var under: String?
        var lastReason: String?
    }

    /// The caller's work to finish before partitions are revoked (``KafkaConsumer/onRevocation(timeout:_:)``).
    struct RevocationHandler: Sendable {
        var timeout: Duration
        var body: @Sendable ([KafkaTopicPartition]) async -> Void
    }

    private let revocationHandler = Mutex<RevocationHandler?>(nil)
    private let lossHandler = Mutex<(@Sendable ([KafkaTopicPartition]) -> Void)?>(nil)

    private let marks = Mutex(Marks())
    private let buffer = Mutex(Buffer())
    private let lifecycle = Mutex(Lifecycle.idle)
    /// Partitions paused because the buffer was full (poll thread and rebalance callbacks only).
    private let paused = Mutex<Set<KafkaTopicPartition>>([])
    private let space = DispatchSemaphore(value: 0)
    /// Signalled by a stop request only (wakes a recovery's backoff).
    private let stopSignal = DispatchSemaphore(value: 0)
    private let stop = Atomic<Bool>(false)
    private let abandon = Atomic<Bool>(false)
    private let generationCounter = Atomic<UInt64>(0)
    private let recovery = Mutex(Recovery())
    /// When the cluster last answered, and the probe that asks it.
    let cluster = ClusterContact()
    /// A group member that has not been given its partitions since it (re)joined.
    private let awaitingAssignment: Atomic<Bool>
    private let capacity: Int
    private let inGroup: Bool
    private let policy: KafkaHealthPolicy
    private let logger: Logger
    private let consumedMetric = Counter(label: "islet_kafka_consumer_messages_total")
    private let errorMetric = Counter(label: "islet_kafka_consumer_errors_total")
    /// How far behind the end of its partitions the consumer is, and whether it gains on it.
    private let lag: Mutex<LagWatch>
    private let lagLookedAt = Atomic<UInt64>(0)
    private let lagLookInterval: UInt64
    private let lagGauge: Gauge
    /// A group member's committed offsets at assignment, of the partitions it holds (-1: none).
    private let committedAtAssignment = Mutex<[KafkaTopicPartition: Int64]>([:])
    /// Records handed to the caller's buffer since the consumer started (the lag watch's progress).
    private let consumed = Atomic<UInt64>(0)
    /// The `fetch.wait.max.ms` of the current handle (poll thread writes, health reads).
    private let fetchWaitMilliseconds = Atomic<Int>(0)

    /// `clientID` and `topics` name the lag gauge's series (a service's consumers share its client id).
    init(
        capacity: Int, inGroup: Bool = true, policy: KafkaHealthPolicy = KafkaHealthPolicy(), clientID: String = "islet", topics: [String] = [],
        logger: Logger
    ) {
        self.capacity = capacity
        self.inGroup = inGroup
        self.awaitingAssignment = Atomic(inGroup)
        self.policy = policy
        self.logger = logger
        self.lag = Mutex(LagWatch(tolerance: policy.lagTolerance))
        self.lagLookInterval = MonotonicTime.nanoseconds(policy.lagLookInterval)
        self.lagGauge = Gauge(label: "islet_kafka_consumer_lag_records", dimensions: Self.lagDimensions(clientID: clientID, topics: topics))
    }

    /// The lag gauge's series: one per consumer of a service, not one its consumers overwrite in turn.
    static func lagDimensions(clientID: String, topics: [String]) -> [(String, String)] {
        [("client", clientID), ("topics", topics.sorted().joined(separator: ","))]
    }

    // MARK: Health

    /// The cluster answered (records fetched, a rebalance).
    func contact(at now: UInt64 = MonotonicTime.now()) {
        cluster.heard(at: now)
    }

    func health(now: UInt64 = MonotonicTime.now()) -> KafkaClientHealth {
        let (under, consecutive, lastReason) = recovery.withLock { ($0.under, $0.consecutive, $0.lastReason) }
        let phase: KafkaHealthSnapshot.Phase
        switch lifecycle.withLock({ $0 }) {
        case .idle: phase = .notStarted
        case .running: phase = under.map { .recovering(reason: $0) } ?? (stopRequested ? .stopping : .running)
        case .finished: phase = .stopping
        }
        let snapshot = KafkaHealthSnapshot(
            phase: phase, consecutiveRecoveries: consecutive, lastRecoveryReason: lastReason, lastContact: cluster.last,
            awaitingAssignment: awaitingAssignment.load(ordering: .acquiring), fallingBehind: inGroup ? nil : lag.withLock(\.behind),
            starved: inGroup ? lag.withLock(\.starved) : nil, fetchWaitMilliseconds: fetchWaitMilliseconds.load(ordering: .relaxed),
            loginRefused: cluster.loginRefused)
        return snapshot.health(now: now, policy: policy)
    }

    /// Looks at how far behind the end of its partitions the consumer is, every
    /// ``KafkaHealthPolicy/lagLookInterval``: the gauge, and a warning when it stops gaining on the end (a replica
    /// that does so long enough is not ready, ``KafkaHealthPolicy/fallingBehindAfter``). Poll thread.
    /// Returns the fetch wait to replace the handle with when the look finds the consumer starved
    /// (``fetchWaitAfterStarving(now:)``): between looks there is nothing new to decide.
    func watchLag(_ client: RDKafkaClient, now: UInt64 = MonotonicTime.now()) -> Duration? {
        let last = lagLookedAt.load(ordering: .relaxed)
        guard last == 0 || now &- last >= lagLookInterval else { return nil }
        lagLookedAt.store(now, ordering: .relaxed)
        let owned = Array(marks.withLock { $0.epochOf.keys })
        // The broker is asked what its fetch answers did not say only while it answers at all.
        let ask = clusterAnswers(at: now)
        let known = client.lag(owned, startingAt: startingOffsets(of: owned, client, asking: ask), askingTheBroker: ask)
        let fetching = paused.withLock { $0.isEmpty }
        let limit = MonotonicTime.nanoseconds(policy.fallingBehindAfter)
        let (wasStuck, stuck, records) = lag.withLock { watch -> (Bool, LagWatch.Behind?, Int64) in
            let wasStuck = watch.behind?.lasted(beyond: limit, at: now) ?? false
            watch.note(known: known, owned: owned, consumed: consumed.load(ordering: .relaxed), fetching: fetching, at: now)
            return (wasStuck, watch.behind.flatMap { $0.lasted(beyond: limit, at: now) ? $0 : nil }, watch.records)
        }
        lagGauge.record(Double(records))
        if !wasStuck, let stuck {
            logger.warning(
                "the consumer is behind the end of its partitions and has not gained on it",
                metadata: [
                    "kafka.lag.records": "\(stuck.records)", "kafka.partitions": "\(owned.count)",
                    "seconds": "\(MonotonicTime.seconds(from: stuck.since, to: now))",
                ])
        } else if wasStuck, stuck == nil {
            logger.notice("the consumer gains on the end of its partitions again", metadata: ["kafka.lag.records": "\(records)"])
        }
        return fetchWaitAfterStarving(now: now)
    }

    /// The cluster answered within ``KafkaHealthPolicy/unreachableAfter``.
    private func clusterAnswers(at now: UInt64) -> Bool {
        let last = cluster.last
        return last > 0 && (now <= last || now - last <= MonotonicTime.nanoseconds(policy.unreachableAfter))
    }

    /// Where a group member started reading partitions it has handed nothing of yet: their
    /// committed offsets, asked for once per assignment (a short request; the answer is kept until
    /// the partition is revoked). Without it a member the broker starves from its first fetch on
    /// would look behind by nothing. A replica's partitions without a position count nothing.
    private func startingOffsets(of owned: [KafkaTopicPartition], _ client: RDKafkaClient, asking: Bool) -> [KafkaTopicPartition: Int64] {
        guard inGroup else { return [:] }
        var starts = committedAtAssignment.withLock { $0 }
        let unasked = owned.filter { starts[$0] == nil }
        if asking, !unasked.isEmpty, let answer = try? client.committedOffsets(unasked, timeoutMilliseconds: 1_000) {
            for (partition, offset) in answer { starts[partition] = offset ?? -1 }
            committedAtAssignment.withLock { $0.merge(starts) { _, new in new } }
        }
        return starts.filter { $0.value >= 0 }
    }

    /// The fetch wait to replace the handle with, when the broker has answered this consumer's
    /// fetches with nothing for ``KafkaHealthPolicy/fallingBehindAfter`` while it was behind and
    /// fetching, and the cluster still answers (a broker that is down is not helped by a longer
    /// wait); `nil` otherwise, or when the wait is already ``KafkaHealthPolicy/longestFetchWait``.
    private func fetchWaitAfterStarving(now: UInt64) -> Duration? {
        guard let starved = lag.withLock(\.starved), starved.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now),
            clusterAnswers(at: now)
        else { return nil }
        return policy.longerFetchWait(after: .milliseconds(fetchWaitMilliseconds.load(ordering: .relaxed)))
    }

    var fetchWait: Int { fetchWaitMilliseconds.load(ordering: .relaxed) }

    /// A handle fetching with `milliseconds` of `fetch.wait.max.ms` replaces the last one: its
    /// starvation is measured afresh, and a group member waits for the group again.
    func useFetchWait(milliseconds: Int, newHandle: Bool) {
        fetchWaitMilliseconds.store(milliseconds, ordering: .relaxed)
        guard newHandle else { return }
        lag.withLock { $0.restartStarvation() }
        if inGroup { awaitingAssignment.store(true, ordering: .releasing) }
    }

    // MARK: Recovery (poll thread)

    /// A replacement of the handle begins; returns how many in a row this is.
    func beginRecovery(reason: KafkaError) -> Int {
        recovery.withLock { recovery in
            recovery.consecutive += 1
            recovery.total += 1
            recovery.under = "\(reason)"
            recovery.lastReason = "\(reason)"
            return recovery.consecutive
        }
    }

    /// The replacement is in place. A replica that was assigned its partitions has recovered
    /// (it has no group to wait for); a group member has once the group assigns it partitions.
    func endRecovery(joined: Bool) {
        recovery.withLock { recovery in
            recovery.under = nil
            if joined && !inGroup { recovery.consecutive = 0 }
        }
    }

    /// A new handle could not be made: it counts toward `failed` like a replacement.
    func countFailedRecovery() {
        recovery.withLock { $0.consecutive += 1 }
    }

    var recoveries: Int { recovery.withLock { $0.total } }

    /// The new handle works (records came, or the group assigned it partitions).
    private func recovered() {
        recovery.withLock { if $0.under == nil { $0.consecutive = 0 } }
    }

    /// A group member's owned partitions are given up as lost (nothing more committed for them,
    /// their buffered messages dropped), and the caller told so; it waits for its next assignment.
    /// A replica keeps what it buffered: its next handle starts after it.
    func loseEverything() {
        guard inGroup else { return }
        let owned = Array(marks.withLock { $0.epochOf.keys })
        _ = willRevoke(owned, lost: true)
        if !owned.isEmpty { didRevoke(owned) }
    }

    /// Waits `duration`, or less once a stop was requested; `false` if it was.
    func sleep(_ duration: Duration) -> Bool {
        guard !stopRequested else { return false }
        _ = stopSignal.wait(timeout: .now() + .milliseconds(Int(duration.librdkafkaMilliseconds)))
        return !stopRequested
    }

    /// The latest revocation's generation; the iterator compares it lock-free on every event.
    var generation: UInt64 { generationCounter.load(ordering: .acquiring) }
    var stopRequested: Bool { stop.load(ordering: .acquiring) }
    var abandonRequested: Bool { abandon.load(ordering: .acquiring) }

    func start() -> Bool {
        lifecycle.withLock { state in
            guard state == .idle else { return false }
            state = .running
            return true
        }
    }

    func claimIterator() -> Bool {
        buffer.withLock { buffer in
            defer { buffer.iteratorClaimed = true }
            return !buffer.iteratorClaimed
        }
    }

    func requestStop() {
        stop.store(true, ordering: .releasing)
        space.signal()
        stopSignal.signal()
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

    // MARK: Backpressure (poll thread)

    /// Flow control between the poll thread and the caller's loop. When the buffer is full the
    /// poll thread first waits briefly for the loop to take it (the normal case: the loop is just
    /// busy). If the loop stalls longer, the consumer pauses fetching of its partitions and the poll
    /// loop goes on — rebalances, marks and the group's poll interval are served however slow the
    /// caller is — and resumes once the loop has taken half the buffer. Pausing makes librdkafka
    /// drop what it prefetched beyond the records already handed over and fetch it again on resume.
    func applyBackpressure(_ client: RDKafkaClient) {
        let count = buffer.withLock { $0.messageCount }
        let pausedNow = paused.withLock { !$0.isEmpty }
        if count >= capacity {
            if !pausedNow && waitForSpace(milliseconds: Self.stallBeforePause) { return }
            let owned = Set(marks.withLock { $0.epochOf.keys })
            let toPause = paused.withLock { paused -> Set<KafkaTopicPartition> in
                let toPause = owned.subtracting(paused)
                paused.formUnion(toPause)
                return toPause
            }
            if !toPause.isEmpty {
                logger.debug("caller's loop stalled: fetching paused", metadata: ["kafka.partitions": "\(toPause.count)"])
                client.pause(Array(toPause))
            }
        } else if pausedNow && count <= capacity / 2 {
            let toResume = paused.withLock { paused -> Set<KafkaTopicPartition> in
                defer { paused.removeAll() }
                return paused
            }
            let stillOwned = toResume.intersection(Set(marks.withLock { $0.epochOf.keys }))
            if !stillOwned.isEmpty { client.resume(Array(stillOwned)) }
        }
    }

    /// How long a full buffer may wait for the caller's loop before fetching is paused, in ms.
    static let stallBeforePause = 500

    /// Waits until the caller's loop took the buffer, up to `milliseconds`; `true` if it did.
    private func waitForSpace(milliseconds: Int) -> Bool {
        let stillFull = buffer.withLock { buffer -> Bool in
            guard buffer.messageCount >= capacity else { return false }
            buffer.pollThreadWaiting = true
            return true
        }
        guard stillFull, !stopRequested else { return true }
        let deadline = DispatchTime.now() + .milliseconds(milliseconds)
        while true {
            if space.wait(timeout: deadline) == .timedOut {
                return buffer.withLock { buffer in
                    buffer.pollThreadWaiting = false
                    return buffer.messageCount < capacity
                }
            }
            if stopRequested || buffer.withLock({ $0.messageCount < capacity }) { return true }
        }
    }

    // MARK: Rebalance (poll thread, inside librdkafka's rebalance callback)

    func didAssign(_ partitions: [KafkaTopicPartition]) {
        contact()
        recovered()
        awaitingAssignment.store(false, ordering: .releasing)
        marks.withLock { marks in
            for tp in partitions {
                let epoch = marks.nextEpoch
                marks.nextEpoch &+= 1
                if let previous = marks.epochOf.updateValue(epoch, forKey: tp) { marks.byEpoch[previous] = nil }
                marks.byEpoch[epoch] = PartitionMarks(partition: tp)
            }
        }
        // A new assignment starts unpaused (the rebalance callback resumes it in librdkafka);
        // the poll loop pauses it again if the buffer is still full.
        paused.withLock { $0.subtract(partitions) }
        enqueue(.partitionsAssigned(partitions))
    }

    func setRevocationHandler(_ handler: RevocationHandler) {
        revocationHandler.withLock { $0 = handler }
    }

    func setLossHandler(_ handler: @escaping @Sendable ([KafkaTopicPartition]) -> Void) {
        lossHandler.withLock { $0 = handler }
    }

    func willRevoke(_ partitions: [KafkaTopicPartition], lost: Bool) -> [KafkaTopicPartition: Int64] {
        let revoked = Set(partitions)
        // Lost: the caller is told at once, before the event reaches its loop (which may be busy).
        if lost, !partitions.isEmpty, let handler = lossHandler.withLock({ $0 }) { handler(partitions) }
        if !lost, !partitions.isEmpty, let handler = revocationHandler.withLock({ $0 }) {
            marks.withLock { $0.revoking.formUnion(revoked) }
            dropBuffered(revoked)
            finishWork(on: partitions, handler)
        }
        // From here on marks of these partitions are refused (and their messages still buffered dropped).
        let toStore = marks.withLock { marks -> [KafkaTopicPartition: Int64] in
            var toStore: [KafkaTopicPartition: Int64] = [:]
            marks.revoking.subtract(revoked)
            for tp in partitions {
                guard let epoch = marks.epochOf.removeValue(forKey: tp) else { continue }
                if let offset = marks.byEpoch.removeValue(forKey: epoch)?.pending { toStore[tp] = offset }
            }
            return toStore
        }
        paused.withLock { $0.subtract(partitions) }
        committedAtAssignment.withLock { committed in for tp in partitions { committed[tp] = nil } }
        // Lost: the group dropped this member; it is not ready until it rejoined and got partitions.
        if lost { awaitingAssignment.store(true, ordering: .releasing) }
        dropBuffered(revoked)
        return lost ? [:] : toStore
    }

    /// Runs the caller's revocation handler and waits for it (poll thread: a thread of its own,
    /// never one of Swift's cooperative pool), at most its timeout.
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

    /// Drops the buffered messages of these partitions: they are never delivered.
    private func dropBuffered(_ revoked: Set<KafkaTopicPartition>) {
        buffer.withLock { buffer in
            let before = buffer.items.count
            buffer.items.removeAll { event in
                if case .message(let message) = event { return revoked.contains(message.topicPartition) }
                return false
            }
            buffer.messageCount -= before - buffer.items.count
            buffer.generation &+= 1
            generationCounter.store(buffer.generation, ordering: .releasing)
        }
    }

    func didRevoke(_ partitions: [KafkaTopicPartition]) {
        enqueue(.partitionsRevoked(partitions))
    }

    /// The events whose partitions are still assigned under the same epoch (non-message events are kept).
    func stillAssigned(_ events: [KafkaConsumerEvent]) -> [KafkaConsumerEvent] {
        marks.withLock { marks in
            events.filter { event in
                guard case .message(let message) = event else { return true }
                return marks.byEpoch[message.assignmentEpoch] != nil && !marks.revoking.contains(message.topicPartition)
            }
        }
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

    /// Hands a batch of messages (stamped with their assignment epoch) to the caller's loop. Never
    /// waits: ``applyBackpressure(_:)`` keeps the buffer near its capacity. Poll thread only.
    func deliver(_ stamped: [KafkaConsumerEvent]) {
        contact()
        recovered()
        consumedMetric.increment(by: Int64(stamped.count))
        consumed.add(UInt64(stamped.count), ordering: .relaxed)
        let waiter = buffer.withLock { buffer in
            if buffer.items.isEmpty {
                buffer.items = stamped
            } else {
                buffer.items.append(contentsOf: stamped)
            }
            buffer.messageCount += stamped.count
            return takeForWaiter(&buffer)
        }
        waiter?.resume()
    }

    /// Appends a rebalance event. Poll thread only.
    private func enqueue(_ event: KafkaConsumerEvent) {
        let waiter = buffer.withLock { buffer in
            buffer.items.append(event)
            return takeForWaiter(&buffer)
        }
        waiter?.resume()
    }

    /// A suspended caller, handed everything buffered (under the lock), ready to be resumed outside it.
    private struct PendingResume {
        let continuation: CheckedContinuation<([KafkaConsumerEvent], UInt64)?, Never>
        let value: ([KafkaConsumerEvent], UInt64)?
        func resume() { continuation.resume(returning: value) }
    }

    private func takeForWaiter(_ buffer: inout Buffer) -> PendingResume? {
        guard let continuation = buffer.waiter else { return nil }
        buffer.waiter = nil
        return PendingResume(continuation: continuation, value: takeAll(&buffer))
    }

    /// Everything buffered with the current generation, or `nil` once finished and drained.
    private func takeAll(_ buffer: inout Buffer) -> ([KafkaConsumerEvent], UInt64)? {
        if buffer.items.isEmpty && buffer.finished { return nil }
        defer {
            buffer.items = []
            buffer.messageCount = 0
            if buffer.pollThreadWaiting {
                buffer.pollThreadWaiting = false
                space.signal()
            }
        }
        return (buffer.items, buffer.generation)
    }

    /// Waits for buffered events; `nil` when the consumer finished (or the task was cancelled).
    func take(isolation actor: isolated (any Actor)?) async -> ([KafkaConsumerEvent], UInt64)? {
        await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<([KafkaConsumerEvent], UInt64)?, Never>) in
                let ready = buffer.withLock { buffer -> PendingResume? in
                    if !buffer.items.isEmpty || buffer.finished || Task.isCancelled {
                        return PendingResume(continuation: continuation, value: Task.isCancelled ? nil : takeAll(&buffer))
                    }
                    buffer.waiter = continuation
                    return nil
                }
                ready?.resume()
            }
        } onCancel: {
            let waiter = buffer.withLock { buffer -> CheckedContinuation<([KafkaConsumerEvent], UInt64)?, Never>? in
                defer { buffer.waiter = nil }
                return buffer.waiter
            }
            waiter?.resume(returning: nil)
        }
    }

    /// No more events after what is buffered. Poll thread only, after close.
    func finishEvents() {
        lifecycle.withLock { $0 = .finished }
        // A consumer that stopped reads nothing more: its series does not keep its last lag.
        lagGauge.record(0)
        let waiter = buffer.withLock { buffer in
            buffer.finished = true
            return takeForWaiter(&buffer)
        }
        waiter?.resume()
    }
}
