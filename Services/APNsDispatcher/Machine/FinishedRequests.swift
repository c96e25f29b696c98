import DequeModule
import Foundation

/// The requests a dispatcher gave a final outcome to, by activity (or push-to-start key), each for
/// ``DispatchMachine/finishedHorizon`` after its outcome: a copy of one that content-service wrote
/// again (a send it retried after a lost acknowledgement, read here minutes later) is known however
/// many requests of other activities finished in between, as long as its activity is among the
/// `maximumActivities` kept (past that, the activity first noted is forgotten first) and fewer than
/// `perActivity` of its own requests finished since (`0`: nothing is kept).
///
/// Ids are kept as their 64-bit hash values with the time of their outcome, 16 bytes each, and only
/// for the horizon: an activity updated once a minute holds 10, one updated every 10 seconds 60 (about
/// 1 KB; 100,000 such activities about 100 MB, the most it holds at the default limits). A new
/// request taken for a copy would need its hash to equal one of the few kept for its own activity
/// (about 1 in 10^17 per request).
struct FinishedRequests {
    private struct Activity {
        /// Oldest first.
        var ids: [(hash: Int, at: Double)] = []
        /// When it last finished a request.
        var at: Date

        /// Notes `hash`, forgetting the ids past the horizon, and the oldest once `limit` are kept.
        mutating func note(_ hash: Int, keeping limit: Int, at now: Date, horizon: TimeInterval) {
            let time = now.timeIntervalSinceReferenceDate
            let expired = ids.prefix { $0.at < time - horizon }.count
            let over = max(0, ids.count - expired + 1 - limit)
            if expired + over > 0 { ids.removeFirst(expired + over) }
            ids.append((hash, time))
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
        self.perActivity = max(0, perActivity)
        self.maximumActivities = max(1, maximumActivities)
        self.horizon = horizon
    }

    /// How many activities it remembers.
    var count: Int { activities.count }

    /// Whether `requestId`, a request of `key`, finished here within the horizon.
    func contains(_ requestId: String, key: String, now: Date) -> Bool {
        guard let activity = activities[key], now.timeIntervalSince(activity.at) <= horizon else { return false }
        let (hash, since) = (requestId.hashValue, now.timeIntervalSinceReferenceDate - horizon)
        return activity.ids.contains { $0.hash == hash && $0.at >= since }
    }

    /// Notes that `requestId`, a request of `key`, has its final outcome.
    mutating func insert(_ requestId: String, key: String, now: Date) {
        guard perActivity > 0 else { return }
        let known = activities.count
        // One lookup, the activity changed where the dictionary keeps it.
        activities[key, default: Activity(at: now)].note(requestId.hashValue, keeping: perActivity, at: now, horizon: horizon)
        if activities.count != known { order.append(key) }
        forget(now: now)
    }

    /// Forgets the activities first noted while they are past the horizon (nothing finished for
    /// that long), or beyond the number kept. (One past the horizon behind a recent one waits:
    /// ``contains(_:key:now:)`` does not count its ids, and the number kept bounds them.)
    mutating func forget(now: Date) {
        while let oldest = order.first, let activity = activities[oldest],
            activities.count > maximumActivities || now.timeIntervalSince(activity.at) > horizon
        {
            order.removeFirst()
            activities[oldest] = nil
        }
    }
}
