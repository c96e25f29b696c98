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
    /// The app says the activity ended (or was dismissed, or cannot be shown) on a device: the
    /// device's record (the activity's own when the app names none). Repeating it changes nothing.
    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func invalidateActivity(
        user: String, activityId: String, bundleId: String? = nil, deviceId: String? = nil, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        try requireReady()
        let activityKey = try activityKey(activityId, bundleId: bundleId, user: user)
        let reason = try Validation.clientReason(reason)
        return try await invalidate(user: user, key: try deviceRecordKey(activityKey, deviceId: deviceId, user: user), reason: reason)
    }

    /// A backend (or Islet) ends the activity: its own record — marked as ended on every device
    /// (``TokenRecord/Invalidation/everyDevice``: no device registers it again), also when the app
    /// on its first device ended it before — then every device's. Under the activity's lock, so no
    /// device registers in between. Repeating it changes nothing; a device's record Kafka did not
    /// take is a 503 (repeat the call).
    public func invalidateEverywhere(_ activityKey: String, reason: InvalidationReason) async throws(APIError) -> WriteResponse {
        try await locks.withLock("activity:" + activityKey) { () async throws(APIError) -> WriteResponse in
            var result: Result<WriteResponse, APIError>
            do throws(APIError) {
                result = .success(try await self.write(key: activityKey) { current, now throws(APIError) in
                    guard let current else { throw APIError.notFound }
                    var next = current
                    next.updatedAt = now
                    if current.state == .invalidated, var invalidation = current.invalidation {
                        guard invalidation.everyDevice != true else { return (current, .unchanged) }
                        invalidation.everyDevice = true
                        next.invalidation = invalidation
                        return (next, .updated)
                    }
                    next.state = .invalidated
                    next.invalidation = .init(reason: reason, invalidatedAt: now, everyDevice: true)
                    return (next, .invalidated)
                })
            } catch {
                result = .failure(error)
            }
            if case .failure(let error) = result, error.status != .notFound { throw error }
            guard await self.invalidateDevices(of: activityKey, except: nil, reason: reason) else {
                throw APIError(
                    .serviceUnavailable, .unavailable, reason: "a device's record of the activity was not acknowledged by Kafka; retry (repeating it is safe)")
            }
            return try result.get()
        }
    }

    /// The app says a push-to-start token must not be used any more.
    public func invalidatePushToStart(
        user: String, bundleId: String, deviceId: String, attributesType: String, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType)
        return try await invalidate(user: user, key: key, reason: try Validation.clientReason(reason))
    }

    /// The app stopped using its widget token for widgets of `kind` (the user removed the last
    /// such widget, or the token changed and was registered again under each kind it serves).
    public func invalidateWidget(
        user: String, bundleId: String, deviceId: String, kind: String, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.widgetKey(bundleId: bundleId, deviceId: deviceId, kind: kind)
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
    /// - Parameter deviceId: the device whose record it is (the activity's own when `nil`).
    public func setFrequentUpdates(user: String, activityId: String, bundleId: String? = nil, deviceId: String? = nil, enabled: Bool)
        async throws(APIError) -> WriteResponse
    {
        try requireReady()
        let key = try deviceRecordKey(try activityKey(activityId, bundleId: bundleId, user: user), deviceId: deviceId, user: user)
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
