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
