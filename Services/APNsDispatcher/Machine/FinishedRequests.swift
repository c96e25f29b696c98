import DequeModule
import Foundation

/// The requests a dispatcher gave a final outcome to, by activity (or push-to-start key), for
/// ``DispatchMachine/finishedHorizon``: a copy of one that content-service wrote again (a send it
/// retried after a lost acknowledgement, read here minutes later) is known however many requests of
/// other activities finished in between. Each activity keeps its last `perActivity` ids, and at most
/// `maximumActivities` activities are kept: past that, the one first noted is forgotten first.
///
/// Ids are kept as their hash values (a few bytes each, so that 100,000 busy activities cost a few
/// MB): a new request taken for a copy would need its hash to equal one of the few kept for its own
/// activity.
struct FinishedRequests {
    private struct Activity {
        var ids: [Int] = []
        var next = 0
        /// When it last finished a request.
        var at: Date

        /// Notes `id`, forgetting what finished before the horizon, and the oldest past `limit`.
        mutating func note(_ id: Int, keeping limit: Int, at now: Date, horizon: TimeInterval) {
            if now.timeIntervalSince(at) > horizon { (ids, next) = ([], 0) }
            if ids.count < limit {
                ids.append(id)
            } else {
                ids[next] = id
                next = (next + 1) % limit
            }
            at = now
        }
    }

    private var activities: [String: Activity] = [:]
    /// The activities in the order they were first noted, each once.
    private var order = Deque<String>()
    let perActivity: Int
    let maximumActivities: Int
    let horizon: TimeInterval

    init(perActivity: Int, maximumActivities: Int, horizon: TimeInterval) {
        self.perActivity = max(1, perActivity)
        self.maximumActivities = max(1, maximumActivities)
        self.horizon = horizon
    }

    /// How many activities it remembers.
    var count: Int { activities.count }

    /// Whether `requestId`, a request of `key`, finished here within the horizon.
    func contains(_ requestId: String, key: String, now: Date) -> Bool {
        guard let activity = activities[key], now.timeIntervalSince(activity.at) <= horizon else { return false }
        return activity.ids.contains(requestId.hashValue)
    }

    /// Notes that `requestId`, a request of `key`, has its final outcome.
    mutating func insert(_ requestId: String, key: String, now: Date) {
        let known = activities.count
        // One lookup, the activity changed where the dictionary keeps it.
        activities[key, default: Activity(at: now)].note(requestId.hashValue, keeping: perActivity, at: now, horizon: horizon)
        if activities.count != known { order.append(key) }
        forget(now: now)
    }

    /// Forgets the activities first noted while they are past the horizon, or beyond the number
    /// kept. (One past the horizon behind a recent one waits: ``contains(_:key:now:)`` does not
    /// count it, and the number kept bounds them.)
    mutating func forget(now: Date) {
        while let oldest = order.first, let activity = activities[oldest],
            activities.count > maximumActivities || now.timeIntervalSince(activity.at) > horizon
        {
            order.removeFirst()
            activities[oldest] = nil
        }
    }
}
