import DequeModule
import Foundation

/// The requests a dispatcher gave a final outcome to, by activity (or push-to-start key), for
/// ``DispatchMachine/finishedHorizon``: a copy of one that content-service wrote again (a send it
/// retried after a lost acknowledgement, read here minutes later) is known however many requests of
/// other activities finished in between. Each activity keeps its last `perActivity` ids, and at most
/// `maximumActivities` activities are kept (the one that finished longest ago is forgotten first).
///
/// Ids are kept as their hash values (a few bytes each, so that 100,000 busy activities cost a few
/// MB): a new request taken for a copy would need its hash to equal one of the few kept for its own
/// activity.
struct FinishedRequests {
    private struct Activity {
        var ids: [Int] = []
        var next = 0
        var at: Date

        mutating func note(_ id: Int, keeping limit: Int, at now: Date) {
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
    /// When each activity finished a request, oldest first; an activity that finished again has a
    /// later note, and its earlier ones are skipped.
    private var order = Deque<(key: String, at: Date)>()
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
        if activities[key].map({ now.timeIntervalSince($0.at) > horizon }) ?? true { activities[key] = Activity(at: now) }
        activities[key]!.note(requestId.hashValue, keeping: perActivity, at: now)  // changed in place
        order.append((key, now))
        forget(now: now)
        if order.count > 2 * activities.count + 1_024 { order = Deque(order.filter { activities[$0.key]?.at == $0.at }) }
    }

    /// Forgets the activities past the horizon, and the oldest beyond the number kept.
    mutating func forget(now: Date) {
        while let oldest = order.first, activities.count > maximumActivities || now.timeIntervalSince(oldest.at) > horizon {
            order.removeFirst()
            if activities[oldest.key]?.at == oldest.at { activities[oldest.key] = nil }
        }
    }
}
