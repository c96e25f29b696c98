/// A budget by what it is for: an activity (`bundleId/activityId`) or a push-to-start device (`bundleId:deviceId`).
public enum BudgetKey: Hashable, Sendable {
    case activity(String)
    case device(String)
}
