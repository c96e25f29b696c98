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
        let (consumer, engine, drainTimeout) = (self.consumer, self.engine, self.drainTimeout)
        handover.install(on: consumer, logger: logger)
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
                    _ = try await handover.assigned(assigned)
                    partitions.assigned(assigned.map(\.partition))
                case .partitionsRevoked(let revoked):
                    handover.revoked(revoked)
                    partitions.revoked(revoked.map(\.partition))
                case .message(let raw):
                    if partitions.takeCheck(raw.partition) {
                        // Not read (the partition is no longer this instance's meanwhile): its next owner reads it.
                        guard await readRecentOutcomes(before: raw) else { continue }
                    }
                    await handle(raw)
                case .partitionEnd:
                    break
                }
            }
            engine.finish()
            group.cancelAll()
        }
    }

    /// What the dispatcher does as partitions come and go (``PartitionHandover``). A partition
    /// moving to another dispatcher (a rebalance, this one stopping): nothing new is sent for it,
    /// and the pushes in flight finish and have their outcomes written before its offsets are
    /// committed, so that the next owner sends none of them again; then its budgets as they are
    /// now, for the next owner (at most 2 s). Lost (the session expired): the engine stops its
    /// work at once, not when the loop reaches the event (it may be waiting for room, for a read,
    /// for a restore). Assigned: its tokens first, so that no request is looked at against a
    /// half-read partition (with its budgets, read from the same partition of the budgets' changelog).
    var handover: PartitionHandover {
        let (engine, tickets, tokenLoader, budgets) = (self.engine, self.tickets, self.tokenLoader, self.budgets)
        return PartitionHandover(
            work: "pushes in flight", finishedNote: ", the rest is left to the next owner", unfinishedNote: "the next owner may send those again",
            finishTimeout: drainTimeout, releaseTimeout: .seconds(2),
            stop: { partitions in
                // A restore of these partitions' tokens under way is not waited for any more.
                tokenLoader.interrupt(partitions: partitions.map(\.partition))
                // From now on nothing of theirs is sent or retried: their pushes in flight finish, and
                // one answered without a final outcome (a retry) is left to the next owner.
                engine.disown(partitions.map(\.partition))
            },
            finish: { partitions, timeout in await tickets.finishRevoked(partitions, engine: engine, timeout: timeout) },
            release: { partitions, timeout in await budgets?.revoked(partitions, within: timeout) },
            lost: { partitions in engine.disown(partitions.map(\.partition)) },
            restore: { partitions in
                await tokenLoader.restore(partitions: partitions.map(\.partition))
                return true
            },
            own: { partitions in
                budgets?.own(Set(partitions.map(\.partition)))
                engine.own(partitions.map(\.partition))
            },
            forget: { revokedPartitions in
                let revoked = Set(revokedPartitions)
                // From now on what of theirs comes back for a retry is left to the next owner
                // too (they may have been lost, without the revocation handler's wait).
                engine.disown(revokedPartitions.map(\.partition))
                let dropped = engine.dropWaiting { ticket in tickets.partition(of: ticket).map(revoked.contains) ?? false }
                tickets.forget(dropped)
                tickets.revoke(revokedPartitions)
                tokenLoader.revoke(partitions: revokedPartitions.map(\.partition))
                budgets?.disown(Set(revokedPartitions.map(\.partition)))
            })
    }

    /// Reads the outcomes written since `raw`, the first request of its partition in this
    /// assignment, into the engine: requests whose outcome was already published are not sent
    /// again. Read until it is read (the partition's requests wait), unless the partition is no
    /// longer this instance's meanwhile (`false`): its next owner reads it.
    private func readRecentOutcomes(before raw: KafkaMessage) async -> Bool {
        let reading = ContinuousClock.now
        guard
            let recent = await recentOutcomes.requestIds(
                partition: raw.partition, firstRequestAt: raw.timestampMilliseconds, while: { consumer.isCurrent(raw) }),
            consumer.isCurrent(raw)
        else { return false }
        engine.alreadyFinished(recent, partition: raw.partition)
        logger.info(
            "outcomes since the partition's first request read",
            metadata: [
                "kafka.partition": "\(raw.partition)", "outcomes.recent": "\(recent.finished.count)",
                "outcomes.maybeDelivered": "\(recent.maybeDelivered.count)",
                "outcomes.readMilliseconds": "\((ContinuousClock.now - reading) / .milliseconds(1))",
            ])
        return true
    }

    /// One request: to the engine, or to the dead letters when it does not decode.
    private func handle(_ raw: KafkaMessage) async {
        // nil: its partition is being revoked; the next owner reads it.
        guard let ticket = tickets.open(raw) else { return }
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
    }
}
