import Foundation
import IsletKafka
import IsletMessages
import IsletTokens

/// An activity's priority-10 budget: a token bucket that holds at most `capacity` sends and
/// refills `capacity` per `period` (continuously).
///
/// Apple gives each activity "a certain budget" of priority-10 pushes per hour and does not say
/// how many; `NSSupportsLiveActivitiesFrequentUpdates` raises it (the user can switch that off).
/// Priority 5 does not count. Islet keeps its own, smaller-or-equal budget so that APNs never
/// throttles: see ``BudgetPolicy`` for the defaults and why.
public struct Budget: Sendable, Equatable {
    // Stored in 24 bytes instead of 40 (a Date, a Duration and an Int): the dispatcher may hold a
    // budget for each of a million live activities.
    private var availableStorage: Double
    private var updatedAtStorage: Double
    private var capacityStorage: Int32
    private var periodMilliseconds: Int32

    public private(set) var available: Double {
        get { availableStorage }
        set { availableStorage = newValue }
    }

    public private(set) var updatedAt: Date {
        get { Date(timeIntervalSinceReferenceDate: updatedAtStorage) }
        set { updatedAtStorage = newValue.timeIntervalSinceReferenceDate }
    }

    public private(set) var limits: BudgetPolicy.Limits {
        get { BudgetPolicy.Limits(capacity: Int(capacityStorage), period: .milliseconds(periodMilliseconds)) }
        set {
            capacityStorage = Int32(clamping: newValue.capacity)
            // Periods are minutes to hours; a period of more than 24 days is held as 24 days.
            periodMilliseconds = Int32(clamping: Int64((newValue.period / .milliseconds(1)).rounded()))
        }
    }

    public init(limits: BudgetPolicy.Limits, now: Date) {
        self.init(limits: limits, available: Double(limits.capacity), updatedAt: now)
    }

    /// A budget as it was written (``DispatchBudgetRecord``): `available` sends left at `updatedAt`.
    public init(limits: BudgetPolicy.Limits, available: Double, updatedAt: Date) {
        availableStorage = min(max(0, available), Double(limits.capacity))
        updatedAtStorage = updatedAt.timeIntervalSinceReferenceDate
        capacityStorage = Int32(clamping: limits.capacity)
        periodMilliseconds = Int32(clamping: Int64((limits.period / .milliseconds(1)).rounded()))
    }

    /// Whether it is full at `now` (what a budget nobody spent is).
    public func isFull(now: Date) -> Bool {
        var copy = self
        copy.refill(now: now)
        return copy.available >= Double(limits.capacity)
    }

    /// The sends it holds at `now`, refilled.
    public func available(now: Date) -> Double {
        var copy = self
        copy.refill(now: now)
        return copy.available
    }

    private var ratePerSecond: Double { Double(limits.capacity) / (limits.period / .seconds(1)) }

    /// Applies a change of limits (the frequent-updates flag changed). Sends already spent in the
    /// window count against the new limits too.
    public mutating func setLimits(_ limits: BudgetPolicy.Limits, now: Date) {
        refill(now: now)
        // What was spent stays spent: a smaller budget is smaller by the difference.
        available = max(0, min(Double(limits.capacity), available + Double(limits.capacity - self.limits.capacity)))
        self.limits = limits
    }

    /// Spends one send if one is available now.
    public mutating func take(now: Date) -> Bool {
        refill(now: now)
        guard available >= 1 else { return false }
        available -= 1
        return true
    }

    /// Whole sends available now.
    public mutating func remaining(now: Date) -> Int {
        refill(now: now)
        return Int(available.rounded(.down))
    }

    /// When the next send will be available (now, if one is).
    public func nextAvailable(now: Date) -> Date {
        var copy = self
        copy.refill(now: now)
        guard copy.available < 1 else { return now }
        return now.addingTimeInterval((1 - copy.available) / ratePerSecond)
    }

    private mutating func refill(now: Date) {
        let elapsed = now.timeIntervalSince(updatedAt)
        guard elapsed > 0 else { return }
        available = min(Double(limits.capacity), available + elapsed * ratePerSecond)
        updatedAt = now
    }
}

/// Every budget the dispatcher keeps, and the one decision made with them: the priority a request
/// goes out with now, or until when it waits. An activity's updates spend its priority-10 budget
/// (``PriorityDecision``); a push-to-start spends its device's budget and waits when it is empty.
///
/// Each budget remembers the partition of the requests that spent it, and which changed since
/// they were last taken for the changelog (``takeChanges(partitions:now:)``): the instance a
/// partition moves to reads them (``restore(_:now:policy:)``) and goes on spending the same budgets.
/// A budget by what it is for: an activity (`bundleId/activityId`) or a push-to-start device (`bundleId:deviceId`).
public enum BudgetKey: Hashable, Sendable {
    case activity(String)
    case device(String)
}

/// A budget to write to the changelog (`budget` nil: forgotten, full again: a tombstone).
public struct BudgetChange: Sendable {
    public var key: BudgetKey
    public var partition: Int32
    public var budget: Budget?
    public var waitingSince: Date?

    init(key: BudgetKey, partition: Int32, budget: Budget?, waitingSince: Date? = nil) {
        self.key = key
        self.partition = partition
        self.budget = budget
        self.waitingSince = waitingSince
    }
}

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
        if request.pushToStartKey != nil, let deviceId = record.deviceId {
            let device = DispatchBudgetRecord.deviceKey(bundleId: record.app.bundleId, deviceId: deviceId)
            var entry = devices[device] ?? DeviceBudget(budget: Budget(limits: policy.pushToStart, now: now))
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
        changed.track(only: partitions)
    }

    /// Budgets changed and not yet taken, in `partitions`.
    func changeCount(partitions: Set<Int32>) -> Int { changed.count(partitions: partitions) }

    /// A record of `islet.dispatch-budgets.v1`, read back.
    mutating func restore(_ record: DispatchBudgetRecord, now: Date) {
        let key: Key =
            if let activityId = record.activityId {
                .activity(MessageKey.activity(bundleId: record.bundleId, activityId: activityId))
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

/// Which priority a request is sent with, given its activity's budget.
public enum PriorityDecision: Equatable, Sendable {
    /// Send now at `priority`; `downgraded` when 10 was asked and 5 is used.
    case send(priority: Int, downgraded: Bool)
    /// A critical update waits for budget until then.
    case wait(until: Date)

    /// Priority 10 spends budget when there is some; otherwise an ordinary update goes at 5, and a
    /// critical one waits for budget — at most `policy.criticalMaximumWait` after it first could
    /// have been sent, then it goes at 5 too. Priority 5 never touches the budget.
    public static func decide(
        requested: Int, urgency: Urgency, budget: inout Budget, waitingSince: Date, now: Date, policy: BudgetPolicy
    ) -> PriorityDecision {
        guard requested == 10 else { return .send(priority: 5, downgraded: false) }
        if budget.take(now: now) { return .send(priority: 10, downgraded: false) }
        if urgency == .critical {
            let giveUp = waitingSince.addingTimeInterval(policy.criticalMaximumWait / .seconds(1))
            let next = budget.nextAvailable(now: now)
            if now < giveUp { return .wait(until: min(next, giveUp)) }
        }
        return .send(priority: 5, downgraded: true)
    }
}
