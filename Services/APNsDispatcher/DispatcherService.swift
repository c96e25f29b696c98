import Foundation
import IsletKafka
import IsletMessages
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

/// The Kafka side of apns-dispatcher: reads `islet.push-requests.v1` in the dispatcher's consumer
/// group, hands each request to the ``DispatchEngine``, and marks a request processed only once
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
/// clocks), not hours; a partition that comes back in the same rebalance is not read at all. On graceful shutdown it stops taking requests, waits for the pushes in
/// flight and their outcomes (at most `drainTimeout`), then commits and leaves the group. A
/// partition revoked by a rebalance is given up the same way: nothing new is sent for it, and its
/// pushes in flight finish before its offsets are committed (``TicketBook/finishRevoked(_:engine:timeout:)``).
public struct DispatcherService: Service {
    let consumer: KafkaConsumer
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
        consumer: KafkaConsumer, deadLetters: DeadLetterWriter, engine: DispatchEngine, tickets: TicketBook, tokenLoader: PartitionTokenLoader,
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
        // Partitions given up cleanly (not lost with an expired session: then another member may
        // have had them meanwhile).
        let cleanlyRevoked = PartitionSet()
        consumer.onRevocation(timeout: drainTimeout + .seconds(3)) { partitions in
            // A restore of these partitions' tokens under way is not waited for any more.
            tokenLoader.interrupt(partitions: partitions.map(\.partition))
            cleanlyRevoked.insert(partitions.map(\.partition))
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
            // Partitions that came to this dispatcher from another whose first request was not
            // read yet: the outcomes written since it are read before it is handled. A partition
            // revoked and assigned back in the same rebalance (Kafka's eager protocol revokes them
            // all) was nobody else's meanwhile: what it did there, this engine remembers.
            var unchecked: Set<Int32> = []
            var revokedLast: Set<Int32> = []
            for await event in consumer.events {
                switch event {
                case .partitionsAssigned(let partitions):
                    let numbers = partitions.map(\.partition)
                    // Their tokens first: no request is looked at against a half-read partition.
                    // (With their budgets, read from the same partitions of the budgets' changelog.)
                    await tokenLoader.restore(partitions: numbers)
                    budgets?.own(Set(numbers))
                    unchecked.formUnion(Set(numbers).subtracting(revokedLast))
                    revokedLast = []
                case .partitionsRevoked(let partitions):
                    let revoked = Set(partitions)
                    let dropped = engine.dropWaiting { ticket in tickets.partition(of: ticket).map(revoked.contains) ?? false }
                    tickets.forget(dropped)
                    tickets.revoke(partitions)
                    tokenLoader.revoke(partitions: partitions.map(\.partition))
                    budgets?.disown(Set(partitions.map(\.partition)))
                    unchecked.subtract(partitions.map(\.partition))
                    revokedLast.formUnion(cleanlyRevoked.take(partitions.map(\.partition)))
                case .message(let raw):
                    if unchecked.remove(raw.partition) != nil {
                        let reading = ContinuousClock.now
                        let recent = await recentOutcomes.requestIds(partition: raw.partition, firstRequestAt: raw.timestampMilliseconds)
                        engine.alreadyFinished(recent.finished, unansweredStarts: recent.unansweredStarts)
                        logger.info(
                            "outcomes since the partition's first request read",
                            metadata: [
                                "kafka.partition": "\(raw.partition)", "outcomes.recent": "\(recent.finished.count)",
                                "outcomes.unansweredStarts": "\(recent.unansweredStarts.count)",
                                "outcomes.readMilliseconds": "\((ContinuousClock.now - reading) / .milliseconds(1))",
                            ])
                    }
                    // nil: its partition is being revoked; the next owner reads it.
                    guard let ticket = tickets.open(raw) else { continue }
                    switch DeadLetterWriter.check(PushRequest.self, raw) {
                    case .success(let request):
                        // Not taken once a drain began: the next owner reads it again.
                        if !(await engine.submit(request, ticket: ticket, partition: raw.partition)) { tickets.abandon([ticket]) }
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

/// Partition numbers one thread notes and another takes.
final class PartitionSet: Sendable {
    private let partitions = Mutex<Set<Int32>>([])

    func insert(_ numbers: [Int32]) { partitions.withLock { $0.formUnion(numbers) } }

    /// Those of `numbers` noted, which are no longer noted after.
    func take(_ numbers: [Int32]) -> Set<Int32> {
        partitions.withLock { noted in
            let taken = noted.intersection(numbers)
            noted.subtract(numbers)
            return taken
        }
    }
}

/// The input records being worked on, by ticket; marks them processed in order when done.
public final class TicketBook: Sendable {
    private struct State {
        var next: UInt64 = 1
        var open: [UInt64: KafkaMessage] = [:]
    }

    private let state = Mutex(State())
    private let tracker = OffsetTracker()
    private let consumer: KafkaConsumer

    public init(consumer: KafkaConsumer) {
        self.consumer = consumer
    }

    /// A ticket for a record read, or `nil` when its partition is being revoked (not worked on).
    func open(_ message: KafkaMessage) -> UInt64? {
        guard tracker.begin(message) else { return nil }
        return state.withLock { state in
            let ticket = state.next
            state.next += 1
            state.open[ticket] = message
            return ticket
        }
    }

    /// The request's outcome is persisted: mark what can be marked.
    public func done(_ ticket: UInt64) {
        guard let message = state.withLock({ $0.open.removeValue(forKey: ticket) }) else { return }
        if let release = tracker.complete(message) {
            consumer.markProcessed(release)
        }
    }

    func partition(of ticket: UInt64) -> KafkaTopicPartition? {
        state.withLock { $0.open[ticket]?.topicPartition }
    }

    func forget(_ tickets: [UInt64]) {
        state.withLock { state in
            for ticket in tickets { state.open[ticket] = nil }
        }
    }

    func revoke(_ partitions: [KafkaTopicPartition]) {
        tracker.revoke(partitions)
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
        let messages = state.withLock { state in tickets.compactMap { state.open.removeValue(forKey: $0) } }
        for message in messages { tracker.abandon(message) }
    }

    /// Records read and not yet released.
    public var openCount: Int { tracker.open }
}

/// Reads the recent outcomes of some partitions of `islet.push-outcomes.v1`: the request ids that
/// already have their final outcome.
public struct RecentOutcomes: Sendable {
    let bootstrapServers: String
    let topic: String
    let window: Duration
    let settings: [String: String]
    let logger: Logger

    public init(bootstrapServers: String, topic: String, window: Duration = .seconds(3_600), settings: [String: String] = [:], logger: Logger) {
        self.bootstrapServers = bootstrapServers
        self.topic = topic
        self.window = window
        self.settings = settings
        self.logger = logger
    }

    /// Request ids of the partitions' recent outcomes.
    public struct Ids: Sendable, Equatable {
        /// With a final outcome: not sent again.
        public var finished: Set<String> = []
        /// Push-to-starts announced as `sending` but without a final outcome: sent before a crash,
        /// answer unknown.
        public var unansweredStarts: Set<String> = []
    }

    /// How much earlier than the first request read again the outcomes read start: a request
    /// content-service wrote twice (a send it retried after a timeout, the same request id) may
    /// come minutes after the first copy, and the clocks of the two services' hosts may differ.
    static let clockMargin: TimeInterval = 600

    /// The request ids of outcomes written to `partition` since the partition's first request read
    /// again was (`firstRequestAt`, its Kafka timestamp in milliseconds, less ``clockMargin``), and
    /// at most `window` ago. On failure it logs and answers what it read (duplicates are then
    /// possible, as after any crash).
    func requestIds(partition: Int32, firstRequestAt: Int64?, now: Date = Date()) async -> Ids {
        let since = Self.since(window: window, firstRequestAt: firstRequestAt, now: now)
        // A read cut short (the cluster stopped answering) is done again: handling the requests
        // with part of the outcomes would send some of them twice. At most `retryLimit`.
        let giveUp = ContinuousClock.now + Self.retryLimit
        var backoff = Duration.seconds(1)
        while true {
            if let ids = await requestIds(partitions: [partition], since: since) { return ids }
            guard !Task.isCancelled, ContinuousClock.now < giveUp else {
                logger.error("recent outcomes could not be read: requests read again may be sent again", metadata: ["kafka.partition": "\(partition)"])
                return Ids()
            }
            logger.warning("recent outcomes not read completely; reading them again", metadata: ["kafka.partition": "\(partition)", "backoff": "\(backoff)"])
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(10))
        }
    }

    /// How long a partition's outcomes are read again and again before its requests go on without them.
    static let retryLimit = Duration.seconds(300)

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
        let reader = try KafkaConsumer(
            configuration: .replica(
                bootstrapServers: bootstrapServers, topics: [topic], partitions: partitions, since: since, clientID: "apns-dispatcher.outcomes",
                settings: settings),
            logger: logger)
        let wanted = Set(partitions)
        let (ids, complete) = try await reader.reading(atMost: .seconds(30)) { reader -> (Ids, Bool) in
            var ids = Ids()
            var ended: Set<Int32> = []
            for await event in reader.events {
                switch event {
                case .message(let message):
                    guard let value = message.value, let outcome = try? IsletJSON.decode(PushOutcome.self, from: value) else { break }
                    if outcome.result.isFinal {
                        ids.finished.insert(outcome.requestId)
                        ids.unansweredStarts.remove(outcome.requestId)
                    } else if !ids.finished.contains(outcome.requestId) {
                        ids.unansweredStarts.insert(outcome.requestId)
                    }
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
