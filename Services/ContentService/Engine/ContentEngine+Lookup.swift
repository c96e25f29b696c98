import Foundation
import IsletKafka
import HeapModule
import IsletMessages
import IsletTokens
import Synchronization

/// What the engine tells about an activity (the lookup API, diagnostics).
extension ContentEngine {
    /// The dispatcher's final outcome of one of the activity's recent requests, if it came.
    public func outcome(of requestId: String, activityKey: String) -> PushResult? {
        state.withLock { $0.memory(activityKey)?.outcome(of: requestId) }
    }

    /// What a backend may ask about an activity (`GET /v1/activities/{activityId}`).
    public struct ActivityView: Sendable {
        /// What this instance remembers of it (`nil`: no event of it handled, or forgotten after the retention).
        public var memory: ActivityMemory?
        /// Its update token in the token table (`nil`: none registered).
        public var token: DeliveryToken?
        /// Its freshness now; `nil` when it is not live (not started, ended, its token dead).
        public var freshness: Freshness?
        /// Since when what the phone shows is out of date.
        public var staleSince: Date?
    }

    /// What is known of an activity (`<bundleId>/<activityId>`): `nil` when neither an event nor a token of it is.
    public func view(of activityKey: String) -> ActivityView? {
        let (now, policy) = (clock.date, freshness)
        let memory = state.withLock { $0.memory(activityKey) }
        let token = tokens.token(forKey: activityKey)
        guard memory != nil || token != nil else { return nil }
        return ActivityView(memory: memory, token: token, freshness: memory?.freshness(now: now, policy: policy), staleSince: memory?.staleSince(now: now))
    }

    /// What is remembered of an activity, by its key (`<bundleId>/<activityId>`; tests, diagnostics).
    public func memory(of activityKey: String) -> ActivityMemory? { state.withLock { $0.memory(activityKey) } }

    /// Activities remembered.
    public var activityCount: Int { state.withLock { $0.index.count } }
}
