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
/// WidgetKit pushes (iOS 26) are budgeted by iOS per device, at a rate Apple does not publish (a
/// widget's reloads are a few dozen a day); Islet sends at most 6 an hour per device. A widget push
/// over budget waits at most ``widgetMaximumWait`` (a newer one for the device replaces it: each
/// only says "reload"), then ends `expired`: held longer, it would hold its partition's committed
/// offset back for up to the time one send takes to refill (10 minutes at 6 an hour).
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
    /// A device's WidgetKit pushes.
    public var widgets: Limits
    /// How long a widget push waits for its device's widget budget, from when it was read.
    public var widgetMaximumWait: Duration = .seconds(120)
    /// How long a `critical` update waits for budget before it is sent at priority 5 anyway.
    public var criticalMaximumWait: Duration

    public init(
        standard: Limits = Limits(capacity: 12, period: .seconds(3_600)),
        frequent: Limits = Limits(capacity: 240, period: .seconds(3_600)),
        pushToStart: Limits = Limits(capacity: 8, period: .seconds(480)),
        widgets: Limits = Limits(capacity: 6, period: .seconds(3_600)),
        criticalMaximumWait: Duration = .seconds(120)
    ) {
        self.widgets = widgets
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
