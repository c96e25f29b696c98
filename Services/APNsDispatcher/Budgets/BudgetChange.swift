import Foundation
import IsletKafka
import IsletMessages
import IsletTokens

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
