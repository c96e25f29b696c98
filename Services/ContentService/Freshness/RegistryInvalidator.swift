import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import Logging
import SwiftProtobuf
import Synchronization

/// token-registry's gRPC API at `host:port`, called with a backend key that has `write`.
public struct RegistryInvalidator: ActivityInvalidating {
    let host: String
    let port: Int
    let key: String
    /// A call not answered within this (connecting included) fails, and is tried again later.
    let timeout: Duration

    public init(host: String, port: Int, key: String, timeout: Duration = .seconds(5)) {
        self.host = host
        self.port = port
        self.key = key
        self.timeout = timeout
    }

    public func invalidate(activityId: String, bundleId: String, reason: InvalidationReason) async throws {
        let request = Islet_Tokens_V1_InvalidateActivityRequest.with {
            $0.activityID = activityId
            $0.bundleID = bundleId
            $0.reason = reason.rawValue
        }
        let metadata: Metadata = ["authorization": "Bearer \(key)"]
        var options = CallOptions.defaults
        options.timeout = timeout
        do {
            _ = try await withGRPCClient(transport: .http2NIOPosix(target: .dns(host: host, port: port), transportSecurity: .plaintext)) { client in
                try await Islet_Tokens_V1_TokenRegistry.Client(wrapping: client).invalidateActivity(request, metadata: metadata, options: options)
            }
        } catch let error as RPCError where error.code == .notFound {
            return  // no token: nothing to end
        }
    }
}
