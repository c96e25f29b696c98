import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import Logging
import Metrics
import Synchronization

/// Ends an activity's token in token-registry (its gRPC `InvalidateActivity`): what the freshness
/// monitor does after it ended an activity by itself (severely stale, or at the end of its
/// lifetime), so that the token stops being offered to every service as live.
public protocol ActivityInvalidating: Sendable {
    /// Throws when token-registry could not be told (it is tried again); an activity it does not
    /// know is not an error.
    func invalidate(activityId: String, bundleId: String, reason: InvalidationReason) async throws
}

/// token-registry's gRPC API at `host:port`, called with a backend key that has `write`.
public struct RegistryInvalidator: ActivityInvalidating {
    let host: String
    let port: Int
    let key: String

    public init(host: String, port: Int, key: String) {
        self.host = host
        self.port = port
        self.key = key
    }

    public func invalidate(activityId: String, bundleId: String, reason: InvalidationReason) async throws {
        let request = Islet_Tokens_V1_InvalidateActivityRequest.with {
            $0.activityID = activityId
            $0.bundleID = bundleId
            $0.reason = reason.rawValue
        }
        let metadata: Metadata = ["authorization": "Bearer \(key)"]
        do {
            _ = try await withGRPCClient(transport: .http2NIOPosix(target: .dns(host: host, port: port), transportSecurity: .plaintext)) { client in
                try await Islet_Tokens_V1_TokenRegistry.Client(wrapping: client).invalidateActivity(request, metadata: metadata)
            }
        } catch let error as RPCError where error.code == .notFound {
            return  // no token: nothing to end
        }
    }
}

/// The token invalidations the freshness monitor owes token-registry for the activities it ended:
/// sent on every pass, and kept for the next one when token-registry cannot be reached (at most
/// `capacity`, the oldest dropped first, so that an unreachable registry cannot grow memory).
public final class TokenInvalidations: Sendable {
    public struct Item: Hashable, Sendable {
        public var activityId: String
        public var bundleId: String
        public var reason: InvalidationReason
    }

    let invalidator: (any ActivityInvalidating)?
    let logger: Logger
    let capacity: Int
    private let items = Mutex<[Item]>([])

    /// - Parameter invalidator: `nil` when token-registry's API is not configured: the items are logged and dropped.
    public init(invalidator: (any ActivityInvalidating)?, logger: Logger, capacity: Int = 10_000) {
        self.invalidator = invalidator
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

    /// Sends what is owed; what fails waits for the next call.
    public func flush() async {
        let owed = items.withLock { items in defer { items.removeAll() }; return items }
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
                Counter(label: "islet_content_invalidations_total", dimensions: [("reason", item.reason.rawValue)]).increment()
            } catch {
                add(item)
                logger.warning(
                    "token-registry could not be told that an activity ended: tried again on the next pass",
                    metadata: ["activity.id": "\(item.activityId)", "app": "\(item.bundleId)", "error": "\(error)"])
            }
        }
    }
}
