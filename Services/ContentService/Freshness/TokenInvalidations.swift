import Foundation
import GRPCCore
import IsletMessages
import Logging
import Synchronization

/// The token invalidations the freshness monitor owes token-registry for the activities it ended:
/// sent on every pass, and kept for the next one when token-registry cannot be reached (at most
/// `capacity`, the oldest dropped first, so that an unreachable registry cannot grow memory).
public final class TokenInvalidations: Sendable {
    public struct Item: Hashable, Sendable {
        public var activityId: String
        public var bundleId: String
        public var reason: InvalidationReason
        /// The end the monitor sent: the token is invalidated once that end has its outcome (or
        /// ``TokenInvalidations/endWait`` after it was sent), so that the end still reaches the phone.
        public var endRequestId: String
        public var endSentAt: Date

        public init(activityId: String, bundleId: String, reason: InvalidationReason, endRequestId: String = "", endSentAt: Date = .distantPast) {
            self.activityId = activityId
            self.bundleId = bundleId
            self.reason = reason
            self.endRequestId = endRequestId
            self.endSentAt = endSentAt
        }
    }

    /// How long an invalidation waits for its end's outcome at most.
    public static let endWait: TimeInterval = 600
    /// At most this many calls per pass (the rest wait for the next): a slow token-registry does not hold up the monitor for long.
    public static let callsPerPass = 100

    let invalidator: (any ActivityInvalidating)?
    let metrics: ContentMetrics
    let logger: Logger
    let capacity: Int
    private let items = Mutex<[Item]>([])

    /// - Parameter invalidator: `nil` when token-registry's API is not configured: the items are logged and dropped.
    public init(invalidator: (any ActivityInvalidating)?, metrics: ContentMetrics, logger: Logger, capacity: Int = 10_000) {
        self.invalidator = invalidator
        self.metrics = metrics
        self.logger = logger
        self.capacity = capacity
    }

    public func add(_ item: Item) {
        items.withLock { items in
            if !items.contains(item) { items.append(item) }
            if items.count > capacity { items.removeFirst(items.count - capacity) }
        }
    }

    /// Waiting to be sent.
    public var count: Int { items.withLock { $0.count } }

    /// Sends what is owed and `ready` (its end has its outcome), at most ``callsPerPass``; what
    /// fails for a reason that may pass waits for the next call, what cannot succeed is dropped.
    public func flush(ready: (Item) -> Bool = { _ in true }) async {
        let owed = items.withLock { items -> [Item] in
            var taken: [Item] = []
            items.removeAll { item in
                guard taken.count < Self.callsPerPass, ready(item) else { return false }
                taken.append(item)
                return true
            }
            return taken
        }
        guard let invalidator else {
            for item in owed {
                logger.notice(
                    "activity ended by the freshness monitor; its token stays active (ISLET_REGISTRY_GRPC is not set)",
                    metadata: ["activity.id": "\(item.activityId)", "app": "\(item.bundleId)", "reason": "\(item.reason.rawValue)"])
            }
            return
        }
        for item in owed {
            do {
                try await invalidator.invalidate(activityId: item.activityId, bundleId: item.bundleId, reason: item.reason)
                metrics.invalidated(item.reason)
            } catch let error as RPCError where [.invalidArgument, .permissionDenied, .unauthenticated, .failedPrecondition].contains(error.code) {
                logger.error(
                    "token-registry refused to invalidate an activity's token (check ISLET_REGISTRY_GRPC_KEY: a key with write): not tried again",
                    metadata: ["activity.id": "\(item.activityId)", "app": "\(item.bundleId)", "error": "\(error)"])
            } catch {
                add(item)
                logger.warning(
                    "token-registry could not be told that an activity ended: tried again on the next pass",
                    metadata: ["activity.id": "\(item.activityId)", "app": "\(item.bundleId)", "error": "\(error)"])
            }
        }
    }
}
