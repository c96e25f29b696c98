import Foundation
import IsletKafka
import IsletMessages
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

/// The Kafka side of apns-dispatcher: reads `islet.push-requests.v1` in the dispatcher's consumer
/// group (a ``KafkaConsumer``; in tests a ``MemoryBus`` member, through the same code), hands each request to the ``DispatchEngine``, and marks a request processed only once
/// its outcome is persisted — in offset order (``OffsetTracker``), although outcomes complete in
/// any order.
///
/// On partition assignment it first reads the same partitions of `islet.tokens.v1` (co-partitioned:
/// every token their requests need is there; ``PartitionTokenLoader``). Before the first request
/// of a partition it reads the outcomes written since that request (the same partition of
/// `islet.push-outcomes.v1`), so that requests read again after a crash, whose outcome was already
/// published, are not sent again — a push-to-start must never start two activities. Requests read
/// again start at the group's committed offset, and their outcomes were all written after the
/// first of them was: the read covers the uncommitted stretch (plus 10 minutes, for copies and
/// clocks), not hours; every assignment is read, also of a partition that comes back. On graceful shutdown it stops taking requests, waits for the pushes in
/// flight and their outcomes (at most `drainTimeout`), then commits and leaves the group. A
/// partition revoked by a rebalance is given up the same way: nothing new is sent for it, and its
/// pushes in flight finish before its offsets are committed (``TicketBook/finishRevoked(_:engine:timeout:)``).
public struct DispatcherService<Consumer: GroupMessageSource>: Service {
    let consumer: Consumer
    let deadLetters: DeadLetterWriter
    let engine: DispatchEngine
    let tickets: TicketBook
    let tokenLoader: PartitionTokenLoader
    /// Where the budgets of its partitions are written (`nil`: not written, a test's).
    let budgets: BudgetChangelog?
    let recentOutcomes: RecentOutcomes
    let drainTimeout: Duration
    let logger: Logger

    public init(
        consumer: Consumer, deadLetters: DeadLetterWriter, engine: DispatchEngine, tickets: TicketBook, tokenLoader: PartitionTokenLoader,
        budgets: BudgetChangelog? = nil, recentOutcomes: RecentOutcomes, drainTimeout: Duration = .seconds(8), logger: Logger
    ) {
        self.consumer = consumer
        self.deadLetters = deadLetters
        self.engine = engine
        self.tickets = tickets
        self.tokenLoader = tokenLoader
        self.budgets = budgets
        self.recentOutcomes = recentOutcomes
        self.drainTimeout = drainTimeout
        self.logger = logger
    }

    public func run() async throws {
        let (consumer, engine, tickets, drainTimeout, logger) = (self.consumer, self.engine, self.tickets, self.drainTimeout, self.logger)
        // A partition moving to another dispatcher (a rebalance, this one stopping): nothing new
        // is sent for it, and the pushes in flight finish and have their outcomes written before
        // its offsets are committed, so that the next owner sends none of them again.
        let (tokenLoader, budgets) = (self.tokenLoader, self.budgets)
        consumer.onRevocation(timeout: drainTimeout + .seconds(3)) { partitions in
            // A restore of these partitions' tokens under way is not waited for any more.
            tokenLoader.interrupt(partitions: partitions.map(\.partition))
            // From now on nothing of theirs is sent or retried: their pushes in flight finish, and
            // one answered without a final outcome (a retry) is left to the next owner.
            engine.disown(partitions.map(\.partition))
            let started = ContinuousClock.now
            let finished = await tickets.finishRevoked(partitions, engine: engine, timeout: drainTimeout)
            let metadata: Logger.Metadata = ["kafka.partitions": "\(partitions)", "took": "\(ContinuousClock.now - started)"]
            if finished {
                logger.info("partitions revoked: their pushes in flight finished, the rest is left to the next owner", metadata: metadata)
            } else {
                logger.warning("partitions revoked before their pushes in flight finished: the next owner may send those again", metadata: metadata)
            }
            // Their budgets as they are now, for the next owner (at most 2 s).
            await budgets?.revoked(Set(partitions.map(\.partition)), within: .seconds(2))
        }
        // Lost (the session expired): the engine stops their work at once, not when the loop
        // reaches the event (it may be waiting for room, for a read, for a restore).
        consumer.onLoss { partitions in engine.disown(partitions.map(\.partition)) }
        try await withThrowingDiscardingTaskGroup { group in
            // The consumer does not stop by itself on graceful shutdown: it would end this loop and
            // cancel the pushes in flight (sent, no outcome: the next owner sends them again).
            group.addTask { try await consumer.run(stoppingOnGracefulShutdown: false) }
            group.addTask { await engine.run() }
            group.addTask {
                // Graceful shutdown (or the loop below ending): finish what is in flight, then commit and leave.
                try? await gracefulShutdown()
                await engine.drain(timeout: drainTimeout)
                consumer.shutdown()
            }
            // Partitions that came to this dispatcher whose first request was not read yet: the
            // outcomes written since it are read before it is handled.
            var partitions = RequestPartitions()
            for await event in consumer.events {
                switch event {
                case .partitionsAssigned(let assigned):
                    let numbers = assigned.map(\.partition)
                    // Their tokens first: no request is looked at against a half-read partition.
                    // (With their budgets, read from the same partitions of the budgets' changelog.)
                    await tokenLoader.restore(partitions: numbers)
                    budgets?.own(Set(numbers))
                    engine.own(numbers)
                    partitions.assigned(numbers)
                case .partitionsRevoked(let revokedPartitions):
                    let revoked = Set(revokedPartitions)
                    // From now on what of theirs comes back for a retry is left to the next owner
                    // too (they may have been lost, without the revocation handler's wait).
                    engine.disown(revokedPartitions.map(\.partition))
                    let dropped = engine.dropWaiting { ticket in tickets.partition(of: ticket).map(revoked.contains) ?? false }
                    tickets.forget(dropped)
                    tickets.revoke(revokedPartitions)
                    tokenLoader.revoke(partitions: revokedPartitions.map(\.partition))
                    budgets?.disown(Set(revokedPartitions.map(\.partition)))
                    partitions.revoked(revoked.map(\.partition))
                case .message(let raw):
                    if partitions.takeCheck(raw.partition) {
                        let reading = ContinuousClock.now
                        // Read until it is read (the partition's requests wait), unless the
                        // partition is no longer this instance's meanwhile: its next owner reads it.
                        guard
                            let recent = await recentOutcomes.requestIds(
                                partition: raw.partition, firstRequestAt: raw.timestampMilliseconds, while: { consumer.isCurrent(raw) }),
                            consumer.isCurrent(raw)
                        else { continue }
                        engine.alreadyFinished(recent, partition: raw.partition)
                        logger.info(
                            "outcomes since the partition's first request read",
                            metadata: [
                                "kafka.partition": "\(raw.partition)", "outcomes.recent": "\(recent.finished.count)",
                                "outcomes.maybeDelivered": "\(recent.maybeDelivered.count)",
                                "outcomes.readMilliseconds": "\((ContinuousClock.now - reading) / .milliseconds(1))",
                            ])
                    }
                    // nil: its partition is being revoked; the next owner reads it.
                    guard let ticket = tickets.open(raw) else { continue }
                    switch DeadLetterWriter.check(PushRequest.self, raw) {
                    case .success(let request):
                        // Not taken once a drain began: the next owner reads it again.
                        let taken = await engine.submit(request, ticket: ticket, partition: raw.partition) { consumer.isCurrent(raw) }
                        if !taken { tickets.abandon([ticket]) }
                    case .failure(let rejection):
                        // Sent until persisted; the ticket is done (and the partition's marks move on)
                        // only then. Throws only at shutdown: the record is read again after it.
                        do {
                            try await deadLetters.send(raw, reason: rejection.reason, detail: rejection.detail)
                            tickets.done(ticket)
                        } catch {
                            logger.warning("shut down while a dead letter was being written: the record will be read again", metadata: ["error": "\(error)"])
                        }
                    }
                case .partitionEnd:
                    break
                }
            }
            engine.finish()
            group.cancelAll()
        }
    }
}

/// The partitions of `islet.push-requests.v1` the dispatcher was assigned, and those whose recent
/// outcomes are to be read before their first request is handled: every partition, at every
/// assignment. A partition given up and assigned back may have been another instance's meanwhile
/// (a cooperative rebalance moves it on later; an eager one may assign it to this instance, then
/// take it away before a record was read; a consumer that joins again as a new member leaves the
/// group in between), and what this engine remembers of its own finished requests is a window, not
/// the partition's history: a request read again past it would be sent again.
struct RequestPartitions {
    private(set) var owned: Set<Int32> = []
    private var unchecked: Set<Int32> = []

    mutating func assigned(_ partitions: [Int32]) {
        owned.formUnion(partitions)
        unchecked.formUnion(partitions)
    }

    mutating func revoked(_ partitions: [Int32]) {
        owned.subtract(partitions)
        unchecked.subtract(partitions)
    }

    /// Whether the recent outcomes of `partition` are to be read before its record is handled (once per assignment).
    mutating func takeCheck(_ partition: Int32) -> Bool { unchecked.remove(partition) != nil }
}

/// The input records being worked on, by ticket; marks them processed in order when done.
public final class TicketBook: Sendable {
    private struct State {
        var next: UInt64 = 1
        var open: [UInt64: OffsetTracker.Work] = [:]
    }

    private let state = Mutex(State())
    private let tracker = OffsetTracker()
    private let markProcessed: @Sendable (KafkaMessage) -> Void

    public convenience init(consumer: some MessageSource) {
        self.init { consumer.markProcessed($0) }
    }

    /// - Parameter markProcessed: marks a record (and every earlier one of its partition) processed.
    public init(markProcessed: @escaping @Sendable (KafkaMessage) -> Void) {
        self.markProcessed = markProcessed
    }

    /// A ticket for a record read, or `nil` when its partition is being revoked (not worked on).
    func open(_ message: KafkaMessage) -> UInt64? {
        guard let work = tracker.beginWork(message) else { return nil }
        return state.withLock { state in
            let ticket = state.next
            state.next += 1
            state.open[ticket] = work
            return ticket
        }
    }

    /// The request's outcome is persisted: mark what can be marked. A ticket of an assignment of
    /// its partition that is over marks nothing (the partition's records are another track now).
    public func done(_ ticket: UInt64) {
        guard let work = state.withLock({ $0.open.removeValue(forKey: ticket) }) else { return }
        if let release = tracker.complete(work) {
            markProcessed(release)
        }
    }

    func partition(of ticket: UInt64) -> KafkaTopicPartition? {
        state.withLock { $0.open[ticket]?.message.topicPartition }
    }

    func forget(_ tickets: [UInt64]) {
        state.withLock { state in
            for ticket in tickets { state.open[ticket] = nil }
        }
    }

    /// These partitions are no longer this instance's: their records and tickets are forgotten
    /// (a request of theirs still held by the engine, or its answer, marks nothing).
    func revoke(_ partitions: [KafkaTopicPartition]) {
        tracker.revoke(partitions)
        let revoked = Set(partitions)
        state.withLock { state in state.open = state.open.filter { !revoked.contains($0.value.message.topicPartition) } }
    }

    /// No record of these partitions is taken any more (they are about to be revoked).
    func beginRevoking(_ partitions: [KafkaTopicPartition]) {
        tracker.beginRevoking(partitions)
    }

    /// Whether a record of these partitions is taken and not yet done or abandoned.
    func isOpen(in partitions: Set<KafkaTopicPartition>) -> Bool {
        tracker.isOpen(in: partitions)
    }

    /// Before these partitions are revoked: no record of theirs is taken any more, their requests
    /// waiting in the engine (not sent; retries waiting for their backoff too) are dropped, and
    /// those in flight finish (their outcome persisted). Returns whether all finished within `timeout`.
    func finishRevoked(_ partitions: [KafkaTopicPartition], engine: DispatchEngine, timeout: Duration) async -> Bool {
        tracker.beginRevoking(partitions)
        let revoked = Set(partitions)
        return await tracker.waitUntilClosed(partitions, timeout: timeout) {
            // Again on every check: an attempt that failed goes back to waiting for its retry.
            abandon(engine.dropWaiting { ticket in self.partition(of: ticket).map(revoked.contains) ?? false })
        }
    }

    /// These records' work will not be done here (dropped, or not taken after a drain began):
    /// nothing waits for them, nothing is marked past them; the next owner reads them again.
    func abandon(_ tickets: [UInt64]) {
        let works = state.withLock { state in tickets.compactMap { state.open.removeValue(forKey: $0) } }
        for work in works { tracker.abandon(work) }
    }

    /// Records read and not yet released.
    public var openCount: Int { tracker.open }

    /// Tickets taken and not yet done, abandoned or forgotten (for tests: nothing leaks).
    var ticketCount: Int { state.withLock { $0.open.count } }
}

/// Reads the recent outcomes of some partitions of `islet.push-outcomes.v1`: the request ids that
/// already have their final outcome.
public struct RecentOutcomes: Sendable {
    /// Makes the replica that reads these partitions of the outcomes topic from the first record
    /// at or after `since` (`nil`: from their start).
    public typealias MakeReader = @Sendable (_ partitions: [Int32], _ since: Date?) throws -> any MessageSource

    let makeReader: MakeReader
    let window: Duration
    let logger: Logger

    /// Reads `topic` of the cluster at `bootstrapServers`.
    public init(bootstrapServers: String, topic: String, window: Duration = .seconds(3_600), settings: [String: String] = [:], logger: Logger) {
        self.init(window: window, logger: logger) { partitions, since in
            try KafkaConsumer(
                configuration: .replica(
                    bootstrapServers: bootstrapServers, topics: [topic], partitions: partitions, since: since, clientID: "apns-dispatcher.outcomes",
                    settings: settings),
                logger: logger)
        }
    }

    /// Reads what `makeReader`'s replicas read (a ``MemoryBus``'s in tests).
    public init(window: Duration = .seconds(3_600), logger: Logger, makeReader: @escaping MakeReader) {
        self.makeReader = makeReader
        self.window = window
        self.logger = logger
    }

    /// What the partitions' recent outcomes say.
    public struct Ids: Sendable {
        /// With a final outcome: not sent again.
        public var finished: Set<String> = []
        /// Announcements (``PushResult/sending``, by announcement id) not taken back by a
        /// ``PushResult/retrying`` naming them, of requests without a final outcome: an attempt may
        /// have reached the phone (a push-to-start announced and not answered before a crash, an
        /// alerting push whose attempt went unanswered).
        public var announcements: [String: Set<String>] = [:]
        /// The newest content sent to each activity (`<bundleId>/<activityId>`), as the outcomes of
        /// attempts that may have reached the phone tell it.
        public var floors: [String: (sequence: Int64, requestId: String)] = [:]

        public init() {}

        /// The requests an attempt of which may have reached the phone.
        public var maybeDelivered: Set<String> { Set(announcements.keys) }

        /// Takes in an outcome read from the topic, in the topic's order.
        public mutating func add(_ outcome: PushOutcome) {
            let requestId = outcome.requestId
            if outcome.result.isFinal {
                finished.insert(requestId)
                announcements[requestId] = nil
            } else if !finished.contains(requestId) {
                // A record from before announcements had ids stands for (or takes back) all of them.
                if outcome.result == .sending {
                    announcements[requestId, default: []].insert(outcome.announcementId ?? "")
                } else if let taken = outcome.announcementId {
                    announcements[requestId]?.remove(taken)
                    if announcements[requestId]?.isEmpty == true { announcements[requestId] = nil }
                } else {
                    announcements[requestId] = nil
                }
            }
            let reached = outcome.result == .delivered || outcome.result == .deliveredDowngraded || outcome.result == .sending
                || (outcome.result == .failed && outcome.attempts > 0)
            if reached, outcome.pushToStartKey == nil, let key = outcome.key, let sequence = outcome.contentSequence,
                sequence > floors[key]?.sequence ?? .min
            {
                floors[key] = (sequence, requestId)
            }
        }
    }

    /// How much earlier than the first request read again the outcomes read start: a request
    /// content-service wrote twice (a send it retried after a timeout, the same request id) may
    /// come minutes after the first copy, and the clocks of the two services' hosts may differ.
    static let clockMargin: TimeInterval = 600

    /// What the outcomes written to `partition` since the partition's first request read again
    /// was (`firstRequestAt`, its Kafka timestamp in milliseconds, less ``clockMargin``), and at
    /// most `window` ago, say. A read cut short (the cluster stopped answering) is done again, with
    /// a backoff, for as long as it takes: handling the requests with part of the outcomes would
    /// send some of them twice, push-to-starts too. `nil` once `wanted` says the partition is no
    /// longer this instance's (or the task is cancelled): its next owner reads them.
    func requestIds(partition: Int32, firstRequestAt: Int64?, now: Date = Date(), while wanted: () -> Bool = { true }) async -> Ids? {
        let since = Self.since(window: window, firstRequestAt: firstRequestAt, now: now)
        return await Self.read(
            partition: partition, logger: logger, wanted: { !Task.isCancelled && wanted() },
            pause: { try? await Task.sleep(for: $0) }, { await requestIds(partitions: [partition], since: since) })
    }

    /// `read` until it reads everything (`nil`: cut short), pausing between reads as ``Rereads``
    /// says, while `wanted`; `nil` once not wanted.
    static func read(
        partition: Int32, logger: Logger, wanted: () -> Bool, pause: (Duration) async -> Void, _ read: () async -> Ids?
    ) async -> Ids? {
        var rereads = Rereads()
        while true {
            if let ids = await read() { return ids }
            guard let wait = rereads.cutShort(stillWanted: wanted()) else { return nil }
            let metadata: Logger.Metadata = ["kafka.partition": "\(partition)", "backoff": "\(wait)", "tries": "\(rereads.tries)"]
            if rereads.tries % 10 == 0 {
                logger.error("recent outcomes still not read: the partition's requests wait for them", metadata: metadata)
            } else {
                logger.warning("recent outcomes not read completely; reading them again", metadata: metadata)
            }
            await pause(wait)
        }
    }

    /// When a read of a partition's recent outcomes cut short is done again: after a pause that
    /// doubles from 1 s to 10 s, for as long as the partition is this instance's. Never "long
    /// enough to go on without them": the requests read again would be sent again, push-to-starts
    /// too (the simulation's outages of the outcomes topic check it).
    struct Rereads: Sendable {
        static let firstPause = Duration.seconds(1)
        static let longestPause = Duration.seconds(10)
        /// Reads cut short so far.
        private(set) var tries = 0
        private var pause = firstPause

        /// After a read cut short: the pause before the next, or `nil` when there is no next (the
        /// partition is no longer this instance's, or the service is stopping).
        mutating func cutShort(stillWanted: Bool) -> Duration? {
            tries += 1
            guard stillWanted else { return nil }
            defer { pause = min(pause * 2, Self.longestPause) }
            return pause
        }
    }

    /// Where the read of outcomes starts: `window` ago, or later when the first request read again
    /// is younger (less ``clockMargin``).
    static func since(window: Duration, firstRequestAt: Int64?, now: Date) -> Date {
        let oldest = now.addingTimeInterval(-(window / .seconds(1)))
        guard let firstRequestAt else { return oldest }
        return max(oldest, Date(timeIntervalSince1970: Double(firstRequestAt) / 1_000 - clockMargin))
    }

    /// The partitions' outcomes since `since` (the whole partitions when a read by time fails);
    /// `nil` when they could not be read completely.
    func requestIds(partitions: [Int32], since: Date) async -> Ids? {
        guard !partitions.isEmpty else { return Ids() }
        do {
            return try await read(partitions: partitions, since: since)
        } catch {
            logger.warning("recent outcomes by time unavailable; reading the partitions whole", metadata: ["error": "\(error)"])
            return try? await read(partitions: partitions, since: nil)
        }
    }

    /// `nil`: cut short after 30 s (a partition never reported its end).
    private func read(partitions: [Int32], since: Date?) async throws -> Ids? {
        let reader = try makeReader(partitions, since)
        let wanted = Set(partitions)
        let (ids, complete) = try await reader.reading(atMost: .seconds(30)) { reader -> (Ids, Bool) in
            var ids = Ids()
            var ended: Set<Int32> = []
            for await event in reader.events {
                switch event {
                case .message(let message):
                    guard let value = message.value, let outcome = try? IsletJSON.decode(PushOutcome.self, from: value) else { break }
                    ids.add(outcome)
                case .partitionEnd(let partition):
                    ended.insert(partition.partition)
                    if ended == wanted { return (ids, true) }
                default:
                    break
                }
            }
            return (ids, false)
        }
        // A partition that never reports its end must not hold the assignment for ever.
        if !complete { logger.warning("recent outcomes: reading cut short after 30 s") }
        return complete ? ids : nil
    }
}
