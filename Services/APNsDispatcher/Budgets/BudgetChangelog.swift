import Foundation
import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle
import Synchronization

/// The budgets' changelog: a ``ChangelogWriter`` of ``BudgetChanges``.
public typealias BudgetChangelog = ChangelogWriter<BudgetChanges>

extension ChangelogWriter where Source == BudgetChanges {
    /// Writes the budgets that changed to `islet.dispatch-budgets.v1` (``DispatchBudgetRecord``):
    /// every `interval` for the partitions this instance owns, and once more for a partition when
    /// it is revoked (``revoked(_:within:)``), so that its next owner reads them when it is
    /// assigned the partition and goes on spending the same budgets.
    ///
    /// Rounds may overlap (a revocation's and a periodic one): each takes its own changes; a record
    /// of the old owner that lands after the new owner read the partition is merged like any other
    /// (the more spent budget wins), so a late write can only make a budget more careful. What the
    /// next owner reads is at most one round old: it may let an activity spend a few sends a second
    /// time (at most what its owner spent in the last `interval`), never more.
    public convenience init(
        engine: DispatchEngine, producer: any MessageSink, topic: String = IsletTopics.dispatchBudgets.name, interval: Duration = .seconds(5),
        logger: Logger
    ) {
        self.init(
            source: BudgetChanges(engine: engine), producer: producer, topic: topic, interval: interval, slice: 256, oneAtATime: false,
            name: "budget changelog", metrics: "islet_dispatch_budget_changelog", logger: logger)
    }

    /// These partitions were assigned (their budgets read with their tokens).
    public func own(_ partitions: Set<Int32>) { source.own(partitions) }

    /// These partitions are no longer this instance's (revoked, or lost with the group session).
    public func disown(_ partitions: Set<Int32>) { source.disown(partitions) }

    /// The partitions owned now.
    public var ownedPartitions: Set<Int32> { source.ownedPartitions }

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
            engine.metrics.budgetRecordInvalid()
            logger.error("budget record ignored", metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }

    /// The record's key and value (`nil`: a tombstone).
    static func record(of change: BudgetChange, writtenAt: Date) throws -> (key: String, value: [UInt8]?) {
        let (bundleId, activityId, deviceId): (String, String?, String?)
        var activityDeviceId: String?
        let key: String
        switch change.key {
        case .activity(let name):
            key = name
            // `<bundleId>/<activityId>`, or one more device's `<bundleId>/<activityId>/<deviceId>`.
            let parts = name.split(separator: "/", maxSplits: 2)
            (bundleId, activityId, deviceId) = (String(parts[0]), parts.count > 1 ? String(parts[1]) : "", nil)
            if parts.count > 2 { activityDeviceId = String(parts[2]) }
        case .device(let name):
            key = name
            let parts = name.split(separator: ":", maxSplits: 1)
            (bundleId, activityId, deviceId) = (String(parts[0]), nil, parts.count > 1 ? String(parts[1]) : "")
        }
        guard let budget = change.budget else { return (key, nil) }
        let record = DispatchBudgetRecord(
            bundleId: bundleId, activityId: activityId, deviceId: deviceId, partition: change.partition, available: budget.available,
            capacity: budget.limits.capacity, periodSeconds: budget.limits.period / .seconds(1), updatedAt: budget.updatedAt,
            waitingSince: change.waitingSince, writtenAt: writtenAt, activityDeviceId: activityDeviceId)
        return (key, try IsletJSON.encode(record))
    }
}
