import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// The app's other writes: ending a token, switching frequent updates.
extension Registry {
    /// The app says the activity ended (or was dismissed, or cannot be shown). Repeating it changes nothing.
    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func invalidateActivity(
        user: String, activityId: String, bundleId: String? = nil, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        try requireReady()
        let key = try activityKey(activityId, bundleId: bundleId, user: user)
        return try await invalidate(user: user, key: key, reason: try Validation.clientReason(reason))
    }

    /// The app says a push-to-start token must not be used any more.
    public func invalidatePushToStart(
        user: String, bundleId: String, deviceId: String, attributesType: String, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType)
        return try await invalidate(user: user, key: key, reason: try Validation.clientReason(reason))
    }

    /// Invalidates the token of `key` for `reason`; `user`, when given, must own it. Repeating it changes nothing.
    public func invalidate(user: String?, key: String, reason: InvalidationReason) async throws(APIError) -> WriteResponse {
        try await write(key: key) { current, now throws(APIError) in
            guard let current, user == nil || current.userId == user else { throw APIError.notFound }
            guard current.state != .invalidated else { return (current, .unchanged) }
            var next = current
            next.state = .invalidated
            next.invalidation = .init(reason: reason, invalidatedAt: now)
            next.updatedAt = now
            return (next, .invalidated)
        }
    }

    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func setFrequentUpdates(user: String, activityId: String, bundleId: String? = nil, enabled: Bool) async throws(APIError)
        -> WriteResponse
    {
        try requireReady()
        let key = try activityKey(activityId, bundleId: bundleId, user: user)
        return try await write(key: key) { current, now throws(APIError) in
            guard let current, current.userId == user else { throw APIError.notFound }
            guard current.frequentUpdatesEnabled != enabled else { return (current, .unchanged) }
            var next = current
            next.frequentUpdatesEnabled = enabled
            next.updatedAt = now
            return (next, .updated)
        }
    }
}
