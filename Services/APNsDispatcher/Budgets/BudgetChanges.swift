import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// The budgets of apns-dispatcher as a changelog's source (``ChangelogWriter``): the budgets of
/// the partitions owned that changed since the last round, a budget full again as a tombstone.
public final class BudgetChanges: ChangelogSource {
    let engine: DispatchEngine
    private let owned = Mutex<Set<Int32>>([])

    init(engine: DispatchEngine) { self.engine = engine }

    public var ownedPartitions: Set<Int32> { owned.withLock { $0 } }
    public var now: Date { engine.clock.date }

    /// These partitions were assigned (their budgets read with their tokens).
    func own(_ partitions: Set<Int32>) {
        let owned = owned.withLock { owned in
            owned.formUnion(partitions)
            return owned
        }
        engine.trackBudgetChanges(of: owned)
    }

    /// These partitions are no longer this instance's (revoked, or lost with the group session):
    /// nothing more of theirs is written.
    func disown(_ partitions: Set<Int32>) {
        owned.withLock { $0.subtract(partitions) }
    }

    public func revoking(_ partitions: Set<Int32>) { disown(partitions) }

    public func take(partitions: Set<Int32>, settleWithin: Duration?) async throws(ChangelogRoundRefused) -> (round: Void, changes: [BudgetChange]) {
        ((), engine.takeBudgetChanges(partitions: partitions))
    }

    public func partition(of change: BudgetChange) -> Int32 { change.partition }

    public func name(of change: BudgetChange) -> String {
        switch change.key {
        case .activity(let name), .device(let name): name
        }
    }

    public func failure(records: Int, partitions: [Int32], error: any Error) -> String { "\(records) budgets not written: \(error)" }

    public func record(of change: BudgetChange, writtenAt: Date) throws -> (key: String, value: [UInt8]?) {
        try BudgetChangelog.record(of: change, writtenAt: writtenAt)
    }

    /// Handed back only where this instance still writes: another owner's now otherwise.
    public func takeBack(_ changes: [BudgetChange], writable: Set<Int32>) {
        engine.budgetChangesAgain(changes.filter { writable.contains($0.partition) })
    }
}
