import Foundation
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
    public private(set) var available: Double
    public private(set) var updatedAt: Date
    public private(set) var limits: BudgetPolicy.Limits

    public init(limits: BudgetPolicy.Limits, now: Date) {
        self.limits = limits
        self.available = Double(limits.capacity)
        self.updatedAt = now
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

/// How large budgets are.
///
/// Defaults: 12 priority-10 sends an hour (a burst of 12) for an ordinary activity, 240 an hour
/// with frequent updates enabled. Apple documents neither number; observed on devices: a budget
/// of about 240 remaining at the "frequent" level
/// (https://github.com/kylebshr/luka-ios/pull/146) and throttling of ordinary activities after
/// roughly a dozen immediate updates an hour. Staying under APNs's own limit matters more than
/// using all of it: a throttled activity stops updating on the lock screen, while a downgraded
/// update (priority 5) still arrives, only not at once. Push-to-start has its own, fixed budget
/// per device (about 10 in a short window, per Apple DTS); Islet allows 8, then one a minute.
public struct BudgetPolicy: Sendable {
    public struct Limits: Sendable, Equatable {
        public var capacity: Int
        public var period: Duration

        public init(capacity: Int, period: Duration) {
            self.capacity = max(1, capacity)
            self.period = period
        }
    }

    public var standard: Limits
    public var frequent: Limits
    /// Budgets of particular apps (by bundle id), instead of `standard` and `frequent`: a sports
    /// app whose users expect every goal at once may be given more than a food-delivery app.
    public var apps: [String: (standard: Limits, frequent: Limits)] = [:]
    public var pushToStart: Limits
    /// How long a `critical` update waits for budget before it is sent at priority 5 anyway.
    public var criticalMaximumWait: Duration

    public init(
        standard: Limits = Limits(capacity: 12, period: .seconds(3_600)),
        frequent: Limits = Limits(capacity: 240, period: .seconds(3_600)),
        pushToStart: Limits = Limits(capacity: 8, period: .seconds(480)),
        criticalMaximumWait: Duration = .seconds(120)
    ) {
        self.standard = standard
        self.frequent = frequent
        self.pushToStart = pushToStart
        self.criticalMaximumWait = criticalMaximumWait
    }

    public func limits(bundleId: String, frequentUpdates: Bool) -> Limits {
        if let app = apps[bundleId] { return frequentUpdates ? app.frequent : app.standard }
        return frequentUpdates ? frequent : standard
    }
}

/// Every budget the dispatcher keeps, and the one decision made with them: the priority a request
/// goes out with now, or until when it waits. An activity's updates spend its priority-10 budget
/// (``PriorityDecision``); a push-to-start spends its device's budget and waits when it is empty.
struct BudgetBook {
    private struct ActivityBudget {
        var budget: Budget
        /// Since when a critical update has been waiting for budget.
        var waitingSince: Date?
    }

    private var activities: [String: ActivityBudget] = [:]
    private var devices: [String: Budget] = [:]

    /// The priority `request` (for the activity or push-to-start key `key`, whose token is
    /// `record`) goes out with now, spending budget; or `.wait` until budget is available.
    mutating func decide(_ request: PushRequest, key: String, record: DeliveryToken, now: Date, policy: BudgetPolicy) -> PriorityDecision {
        if request.pushToStartKey != nil, let deviceId = record.deviceId {
            let device = "\(record.app.bundleId):\(deviceId)"
            var budget = devices[device] ?? Budget(limits: policy.pushToStart, now: now)
            defer { devices[device] = budget }
            guard budget.take(now: now) else { return .wait(until: budget.nextAvailable(now: now)) }
            return .send(priority: request.priority, downgraded: false)
        }
        let limits = policy.limits(bundleId: record.app.bundleId, frequentUpdates: record.frequentUpdatesEnabled)
        var entry = activities[key] ?? ActivityBudget(budget: Budget(limits: limits, now: now))
        if entry.budget.limits != limits { entry.budget.setLimits(limits, now: now) }
        let decision = PriorityDecision.decide(
            requested: request.priority, urgency: request.urgency, budget: &entry.budget, waitingSince: entry.waitingSince ?? now, now: now,
            policy: policy)
        switch decision {
        case .wait: entry.waitingSince = entry.waitingSince ?? now
        case .send: entry.waitingSince = nil
        }
        activities[key] = entry
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
        return Self.isFull(entry.budget, now: now)
    }

    mutating func forget(_ key: String) { activities[key] = nil }

    /// Forgets the budgets that are full again.
    mutating func sweep(now: Date) {
        activities = activities.filter { !Self.isFull($0.value.budget, now: now) }
        devices = devices.filter { !Self.isFull($0.value, now: now) }
    }

    var activityKeys: Set<String> { Set(activities.keys) }
    var deviceCount: Int { devices.count }

    private static func isFull(_ budget: Budget, now: Date) -> Bool {
        var budget = budget
        return budget.remaining(now: now) >= budget.limits.capacity
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
