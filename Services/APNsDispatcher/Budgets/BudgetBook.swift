import Foundation
import IsletKafka
import IsletMessages
import IsletTokens

/// Every budget the dispatcher keeps, and the one decision made with them: the priority a request
/// goes out with now, or until when it waits. An activity's updates spend its priority-10 budget
/// (``PriorityDecision``); a push-to-start spends its device's budget and waits when it is empty,
/// and so does a widget push, with its device's widget budget.
///
/// Each budget remembers the partition of the requests that spent it, and which changed since
/// they were last taken for the changelog (``takeChanges(partitions:now:)``): the instance a
/// partition moves to reads them (``restore(_:now:policy:)``) and goes on spending the same budgets.
struct BudgetBook {
    /// 40 bytes: optionals held with a sentinel (an `Optional`'s extra byte would pad each to 8).
    private struct ActivityBudget {
        var budget: Budget
        private var waitingSinceStorage = Double.nan
        private var partitionStorage: Int32 = -1
        /// Priority 10 spent it (or it was read from the changelog): the changelog has or will have
        /// it, and a tombstone when it is forgotten. One only priority 5 touched is not written.
        var spent = false

        init(budget: Budget, waitingSince: Date? = nil, partition: Int32? = nil, spent: Bool = false) {
            self.budget = budget
            self.spent = spent
            self.waitingSince = waitingSince
            self.partition = partition
        }

        /// Since when a critical update has been waiting for budget.
        var waitingSince: Date? {
            get { waitingSinceStorage.isNaN ? nil : Date(timeIntervalSinceReferenceDate: waitingSinceStorage) }
            set { waitingSinceStorage = newValue?.timeIntervalSinceReferenceDate ?? .nan }
        }

        var partition: Int32? {
            get { partitionStorage < 0 ? nil : partitionStorage }
            set { partitionStorage = newValue ?? -1 }
        }
    }

    private struct DeviceBudget {
        var budget: Budget
        private var partitionStorage: Int32 = -1

        init(budget: Budget, partition: Int32? = nil) {
            self.budget = budget
            self.partition = partition
        }

        var partition: Int32? {
            get { partitionStorage < 0 ? nil : partitionStorage }
            set { partitionStorage = newValue ?? -1 }
        }
    }

    typealias Key = BudgetKey
    typealias Change = BudgetChange

    private var activities: [String: ActivityBudget] = [:]
    private var devices: [String: DeviceBudget] = [:]
    /// Budgets changed since last taken, by partition.
    private var changed = PartitionChanges<Key>()
    /// The key as the token table holds it, to share its storage (a long key held once, not twice).
    private let heldKey: @Sendable (String) -> String?

    init(heldKey: @escaping @Sendable (String) -> String? = { _ in nil }) {
        self.heldKey = heldKey
    }

    /// The priority `request` (for the activity or push-to-start key `key`, whose token is
    /// `record`, read from `partition`) goes out with now, spending budget; or `.wait` until
    /// budget is available.
    mutating func decide(
        _ request: PushRequest, key: String, record: DeliveryToken, partition: Int32? = nil, now: Date, policy: BudgetPolicy
    ) -> PriorityDecision {
        if request.pushToStartKey != nil || request.isWidget, let deviceId = record.deviceId {
            // A device's widget pushes have a budget of their own, kept under the widgets' topic
            // (`<bundleId>.push-type.widgets`) as a device's push-to-start budget is under its app.
            let bundleId = request.isWidget ? record.app.bundleId + APNsPush.widgetsSuffix : record.app.bundleId
            let limits = request.isWidget ? policy.widgets : policy.pushToStart
            let device = DispatchBudgetRecord.deviceKey(bundleId: bundleId, deviceId: deviceId)
            var entry = devices[device] ?? DeviceBudget(budget: Budget(limits: limits, now: now))
            if entry.budget.limits != limits { entry.budget.setLimits(limits, now: now) }
            if let partition { entry.partition = partition }
            defer {
                devices[device] = entry
                noteChanged(.device(device), partition: entry.partition)
            }
            guard entry.budget.take(now: now) else { return .wait(until: entry.budget.nextAvailable(now: now)) }
            return .send(priority: request.priority, downgraded: false)
        }
        return decide(request, key: key, limits: policy.limits(bundleId: record.app.bundleId, frequentUpdates: record.frequentUpdatesEnabled),
            partition: partition, now: now, policy: policy)
    }

    /// The priority a broadcast goes at: the channel's own priority-10 budget, kept under its
    /// activity's key like an activity's. Apple documents no numbers for broadcasts; a channel
    /// that stores no message gets more broadcasts, and is given the frequent-updates budget.
    mutating func decideBroadcast(
        _ request: PushRequest, key: String, storagePolicy: Int, partition: Int32? = nil, now: Date, policy: BudgetPolicy
    ) -> PriorityDecision {
        decide(request, key: key, limits: policy.limits(bundleId: request.app.bundleId, frequentUpdates: storagePolicy == 0), partition: partition, now: now, policy: policy)
    }

    private mutating func decide(
        _ request: PushRequest, key: String, limits: BudgetPolicy.Limits, partition: Int32?, now: Date, policy: BudgetPolicy
    ) -> PriorityDecision {
        let known = activities[key]
        var entry = known ?? ActivityBudget(budget: Budget(limits: limits, now: now))
        if let partition { entry.partition = partition }
        if entry.budget.limits != limits { entry.budget.setLimits(limits, now: now) }
        let decision = PriorityDecision.decide(
            requested: request.priority, urgency: request.urgency, budget: &entry.budget, waitingSince: entry.waitingSince ?? now, now: now,
            policy: policy)
        switch decision {
        case .wait: entry.waitingSince = entry.waitingSince ?? now
        case .send: entry.waitingSince = nil
        }
        // Priority 5 spends nothing: nothing to write.
        if request.priority == 10 {
            entry.spent = true
            noteChanged(.activity(key), partition: entry.partition)
        }
        activities[known == nil ? (heldKey(key) ?? key) : key] = entry
        return decision
    }

    /// Whole priority-10 sends left in the activity's budget.
    mutating func remaining(for key: String, now: Date) -> Int? {
        activities[key]?.budget.remaining(now: now)
    }

    /// Whether the activity's budget says nothing a fresh one would not: it is full again. (A
    /// critical update waiting for budget never finds it full; one that left without being sent —
    /// dropped, expired, its partition revoked — must not keep the entry for ever.)
    func isFresh(_ key: String, now: Date) -> Bool {
        guard let entry = activities[key] else { return true }
        return entry.budget.isFull(now: now)
    }

    mutating func forget(_ key: String) {
        if let entry = activities.removeValue(forKey: key), entry.spent { noteChanged(.activity(key), partition: entry.partition) }
    }

    /// Forgets the budgets that are full again.
    mutating func sweep(now: Date) {
        for (key, entry) in activities where entry.budget.isFull(now: now) {
            activities[key] = nil
            if entry.spent { noteChanged(.activity(key), partition: entry.partition) }
        }
        for (key, entry) in devices where entry.budget.isFull(now: now) {
            devices[key] = nil
            noteChanged(.device(key), partition: entry.partition)
        }
    }

    var activityKeys: Set<String> { Set(activities.keys) }
    var deviceCount: Int { devices.count }

    // MARK: The changelog

    private mutating func noteChanged(_ key: Key, partition: Int32?) {
        changed.note(key, partition: partition)
    }

    /// Takes the budgets of `partitions` that changed since they were last taken.
    mutating func takeChanges(partitions: Set<Int32>) -> [Change] {
        var taken: [Change] = []
        for (partition, keys) in changed.take(partitions: partitions) {
            for key in keys {
                switch key {
                case .activity(let name):
                    let entry = activities[name]
                    taken.append(Change(key: key, partition: partition, budget: entry?.budget, waitingSince: entry?.waitingSince))
                case .device(let name):
                    taken.append(Change(key: key, partition: partition, budget: devices[name]?.budget))
                }
            }
        }
        return taken
    }

    /// Changes taken that did not reach the changelog: taken again next time.
    mutating func changedAgain(_ changes: [Change]) {
        for change in changes { changed.note(change.key, partition: change.partition) }
    }

    /// Stops tracking changes of partitions other than `partitions` (they are another instance's).
    mutating func trackChanges(of partitions: Set<Int32>) {
        changed.keep(only: partitions)
    }

    /// Budgets changed and not yet taken, in `partitions`.
    func changeCount(partitions: Set<Int32>) -> Int { changed.count(partitions: partitions) }

    /// A record of `islet.dispatch-budgets.v1`, read back.
    mutating func restore(_ record: DispatchBudgetRecord, now: Date) {
        let key: Key =
            if record.activityId != nil, let key = record.key {
                .activity(key)
            } else {
                .device(DispatchBudgetRecord.deviceKey(bundleId: record.bundleId, deviceId: record.deviceId ?? ""))
            }
        let budget = Budget(
            limits: .init(capacity: record.capacity, period: .milliseconds(Int64((record.periodSeconds * 1_000).rounded()))),
            available: record.available, updatedAt: record.updatedAt)
        restore(key, partition: record.partition, budget: budget, waitingSince: record.waitingSince, now: now)
    }

    /// A budget read from the changelog. With none known, it is taken as it is; with one known,
    /// the more spent of the two stays, both refilled to `now` (the record may be this instance's
    /// own, read back, or an earlier owner's that this instance has spent beyond since). A budget
    /// full by now, or of other limits than the one known (the frequent-updates flag changed
    /// since), changes nothing. Not written again: the changelog has it.
    mutating func restore(_ key: Key, partition: Int32, budget: Budget, waitingSince: Date?, now: Date) {
        guard !budget.isFull(now: now) else { return }
        switch key {
        case .activity(let name):
            if let known = activities[name] {
                guard known.budget.limits == budget.limits, budget.available(now: now) < known.budget.available(now: now) else { return }
                activities[name] = ActivityBudget(
                    budget: budget, waitingSince: known.waitingSince ?? waitingSince, partition: known.partition ?? partition, spent: true)
            } else {
                activities[heldKey(name) ?? name] = ActivityBudget(budget: budget, waitingSince: waitingSince, partition: partition, spent: true)
            }
        case .device(let name):
            if let known = devices[name] {
                guard known.budget.limits == budget.limits, budget.available(now: now) < known.budget.available(now: now) else { return }
                devices[name] = DeviceBudget(budget: budget, partition: known.partition ?? partition)
            } else {
                devices[name] = DeviceBudget(budget: budget, partition: partition)
            }
        }
    }
}
