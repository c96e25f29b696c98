import Foundation
import IsletMessages

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
