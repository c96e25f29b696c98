import Crypto
import GRPCCore

/// Checks every call of a gRPC API: an `authorization: Bearer <key>` metadata entry naming a
/// configured backend (else UNAUTHENTICATED), which holds the permission the method needs (else
/// PERMISSION_DENIED). A method missing from `permissions` is refused to everyone.
public struct BackendAuthInterceptor: ServerInterceptor {
    let keys: BackendKeys
    /// The permission each method (`fullyQualifiedMethod`, e.g. `islet.registry.v1.TokenRegistry/LookupActivity`) needs.
    let permissions: [String: BackendPermission]

    public init(keys: BackendKeys, permissions: [MethodDescriptor: BackendPermission]) {
        self.keys = keys
        self.permissions = Dictionary(uniqueKeysWithValues: permissions.map { ($0.key.fullyQualifiedMethod, $0.value) })
    }

    public func intercept<Input: Sendable, Output: Sendable>(
        request: StreamingServerRequest<Input>,
        context: ServerContext,
        next: @Sendable (StreamingServerRequest<Input>, ServerContext) async throws -> StreamingServerResponse<Output>
    ) async throws -> StreamingServerResponse<Output> {
        guard let needed = permissions[context.descriptor.fullyQualifiedMethod] else {
            return StreamingServerResponse(error: RPCError(code: .permissionDenied, message: "this method is not open to backends"))
        }
        let authorization = keys.authorize(request.metadata[stringValues: "authorization"].map { $0 }, needs: needed)
        let reason = authorization.refusal(needs: needed, send: "one 'authorization: Bearer <key>' metadata entry") ?? ""
        switch authorization {
        case .missing, .unknownKey: return StreamingServerResponse(error: RPCError(code: .unauthenticated, message: reason))
        case .denied: return StreamingServerResponse(error: RPCError(code: .permissionDenied, message: reason))
        case .allowed: break
        }
        return try await next(request, context)
    }
}

extension BackendAuthInterceptor {
    /// token-registry's methods: lookups read, invalidation writes.
    public static let tokenRegistryMethods: [MethodDescriptor: BackendPermission] = [
        Islet_Tokens_V1_TokenRegistry.Method.LookupActivity.descriptor: .read,
        Islet_Tokens_V1_TokenRegistry.Method.ListUserActivities.descriptor: .read,
        Islet_Tokens_V1_TokenRegistry.Method.InvalidateActivity.descriptor: .write,
    ]

    /// content-service's methods: publishing events writes, the stale list reads.
    public static let activityServiceMethods: [MethodDescriptor: BackendPermission] = [
        Islet_Content_V1_ActivityService.Method.Start.descriptor: .write,
        Islet_Content_V1_ActivityService.Method.Update.descriptor: .write,
        Islet_Content_V1_ActivityService.Method.End.descriptor: .write,
        Islet_Content_V1_ActivityService.Method.ListStaleActivities.descriptor: .read,
    ]
}
