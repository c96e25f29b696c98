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
