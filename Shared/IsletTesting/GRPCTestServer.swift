import GRPCCore
import GRPCNIOTransportHTTP2
import IsletProtos

/// Serves `services` (behind `interceptors`) on a free loopback port for the duration of `body`,
/// which gets a plaintext client connected to it; then shuts the server down, also when `body` throws.
public func withGRPCServer<T: Sendable>(
    _ services: [any RegistrableRPCService], interceptors: [any ServerInterceptor] = [],
    isolation: isolated (any Actor)? = #isolation,
    _ body: (GRPCClient<HTTP2ClientTransport.Posix>) async throws -> T
) async throws -> T {
    let service = GRPCServerService(host: "127.0.0.1", port: 0, services: services, interceptors: interceptors)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await service.server.serve() }
        do {
            guard let port = try await service.listeningPort else { throw TestSetupError("the gRPC server did not listen") }
            let result = try await withGRPCClient(
                transport: .http2NIOPosix(target: .ipv4(address: "127.0.0.1", port: port), transportSecurity: .plaintext)
            ) { client in try await body(client) }
            service.server.beginGracefulShutdown()
            try await group.waitForAll()
            return result
        } catch {
            service.server.beginGracefulShutdown()
            throw error
        }
    }
}
