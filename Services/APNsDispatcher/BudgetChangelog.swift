import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Writes the budgets that changed to `islet.dispatch-budgets.v1` (``DispatchBudgetRecord``): every
/// `interval` for the partitions this instance owns, and once more for a partition when it is
/// revoked (``revoked(_:within:)``), so that its next owner reads them when it is assigned the
/// partition and goes on spending the same budgets. A budget full again is written as a tombstone.
///
/// Only partitions owned (or being revoked, within the revocation's time) are written: one writer
/// per partition. A record that Kafka did not take is written in the next round. Rounds may
/// overlap (a revocation's and a periodic one): each takes its own changes; a record of the old
/// owner that lands after the new owner read the partition is merged like any other (the more
/// spent budget wins), so a late write can only make a budget more careful. What the next
/// owner reads is at most one round old: it may let an activity spend a few sends a second time
/// (at most what its owner spent in the last `interval`), never more.
public final class BudgetChangelog: Service, Sendable {
    let engine: DispatchEngine
    let producer: any MessageSink
    let topic: String
    public let interval: Duration
    let logger: Logger
    private let state = Mutex(WriterState())

    private struct WriterState {
        var owned: Set<Int32> = []
        /// Partitions being revoked, whose revocation round may still write them.
        var releasing: Set<Int32> = []
        /// Why the last round did not write everything (`nil`: it did).
        var failure: String?
    }

    public init(
        engine: DispatchEngine, producer: any MessageSink, topic: String = IsletTopics.dispatchBudgets.name, interval: Duration = .seconds(5),
        logger: Logger
    ) {
        self.engine = engine
        self.producer = producer
        self.topic = topic
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        while (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }) != nil {
            await write()
        }
        // The last round is the revocation's, when the service stops.
    }

    /// These partitions were assigned (their budgets read with their tokens).
    public func own(_ partitions: Set<Int32>) {
        let owned = state.withLock { state in
            state.owned.formUnion(partitions)
            return state.owned
        }
        engine.trackBudgetChanges(of: owned)
    }

    /// How many budget records a round has on their way to Kafka at once.
    static let inFlight = 256

    /// These partitions are no longer this instance's (revoked, or lost with the group session):
    /// nothing more of theirs is written.
    public func disown(_ partitions: Set<Int32>) {
        state.withLock { $0.owned.subtract(partitions) }
    }

    /// These partitions are being revoked (from the consumer's revocation handler, once their
    /// pushes in flight finished): their budgets that changed are written now, at most within
    /// `timeout`; after it, nothing more of theirs is written by this instance.
    public func revoked(_ partitions: Set<Int32>, within timeout: Duration) async {
        state.withLock { state in
            state.owned.subtract(partitions)
            state.releasing.formUnion(partitions)
        }
        await waitAtMost(timeout) { await self.write(partitions: partitions) }
        state.withLock { $0.releasing.subtract(partitions) }
    }

    /// Why the last round did not write everything (`nil`: it did).
    public var failure: String? { state.withLock { $0.failure } }

    /// The partitions owned now.
    public var ownedPartitions: Set<Int32> { state.withLock { $0.owned } }

    private var writable: Set<Int32> { state.withLock { $0.owned.union($0.releasing) } }

    /// One round, of the partitions owned (or of these, while they are owned or being revoked).
    /// Returns the records written.
    @discardableResult
    public func write(partitions: Set<Int32>? = nil) async -> Int {
        let partitions = partitions.map { $0.intersection(self.writable) } ?? state.withLock { $0.owned }
        let changes = engine.takeBudgetChanges(partitions: partitions)
        guard !changes.isEmpty else {
            state.withLock { $0.failure = nil }
            return 0
        }
        let now = Date()
        let (producer, topic) = (self.producer, self.topic)
        // At most `Self.inFlight` sends at once: a round of a million changes is not a million tasks.
        var failed: [(BudgetBook.Change, any Error)] = []
        for start in stride(from: 0, to: changes.count, by: Self.inFlight) {
            let slice = changes[start..<min(start + Self.inFlight, changes.count)]
            failed += await withTaskGroup(of: (BudgetBook.Change, (any Error)?).self) { group in
                for change in slice {
                    group.addTask {
                        do {
                            let (key, value) = try Self.record(of: change, writtenAt: now)
                            _ = try await producer.send(topic: topic, key: key, value: value, headers: [], partition: change.partition)
                            return (change, nil)
                        } catch {
                            return (change, error)
                        }
                    }
                }
                var failed: [(BudgetBook.Change, any Error)] = []
                for await (change, error) in group {
                    if let error { failed.append((change, error)) }
                }
                return failed
            }
        }
        // Handed back only where this instance still writes: another owner's now otherwise.
        let stillWritable = writable
        engine.budgetChangesAgain(failed.map(\.0).filter { stillWritable.contains($0.partition) })
        let written = changes.count - failed.count
        Counter(label: "islet_dispatch_budget_changelog_records_total").increment(by: written)
        if let error = failed.last?.1 {
            Counter(label: "islet_dispatch_budget_changelog_failures_total").increment()
            let reason = "\(failed.count) budgets not written: \(error)"
            state.withLock { $0.failure = reason }
            logger.warning("budget changelog round incomplete; the next round writes the rest", metadata: ["reason": "\(reason)"])
        } else {
            state.withLock { $0.failure = nil }
        }
        return written
    }

    /// A record of the changelog read back (a partition assigned, or followed while held) into the engine.
    static func restore(_ message: KafkaMessage, into engine: DispatchEngine, logger: Logger) {
        // A tombstone: the budget was full again; nothing to restore.
        guard let value = message.value else { return }
        do {
            let record = try IsletJSON.decode(DispatchBudgetRecord.self, from: value)
            try record.validate()
            engine.restoreBudget(record)
        } catch {
            // Written by the dispatcher itself: a record that does not decode is a bug, not input to guess at.
            Counter(label: "islet_dispatch_budget_changelog_invalid_records_total").increment()
            logger.error("budget record ignored", metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }

    /// The record's key and value (`nil`: a tombstone).
    static func record(of change: BudgetBook.Change, writtenAt: Date) throws -> (key: String, value: [UInt8]?) {
        let (bundleId, activityId, deviceId): (String, String?, String?)
        let key: String
        switch change.key {
        case .activity(let name):
            key = name
            let parts = name.split(separator: "/", maxSplits: 1)
            (bundleId, activityId, deviceId) = (String(parts[0]), parts.count > 1 ? String(parts[1]) : "", nil)
        case .device(let name):
            key = name
            let parts = name.split(separator: ":", maxSplits: 1)
            (bundleId, activityId, deviceId) = (String(parts[0]), nil, parts.count > 1 ? String(parts[1]) : "")
        }
        guard let budget = change.budget else { return (key, nil) }
        let record = DispatchBudgetRecord(
            bundleId: bundleId, activityId: activityId, deviceId: deviceId, partition: change.partition, available: budget.available,
            capacity: budget.limits.capacity, periodSeconds: budget.limits.period / .seconds(1), updatedAt: budget.updatedAt,
            waitingSince: change.waitingSince, writtenAt: writtenAt)
        return (key, try IsletJSON.encode(record))
    }
}
