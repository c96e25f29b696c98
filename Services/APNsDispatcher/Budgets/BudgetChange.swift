import Foundation
import IsletKafka
import IsletMessages
import IsletTokens

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
