import GRPCCore
import GRPCNIOTransportHTTP2
import ServiceLifecycle

/// A gRPC server as a `Service`: serves until graceful shutdown, then finishes the calls in flight.
public struct GRPCServerService: Service {
    public let server: GRPCServer<HTTP2ServerTransport.Posix>
    private let onListening: @Sendable (Int) -> Void

    /// - Parameter onListening: called with the port once the server listens (port 0 picks one).
    public init(
        host: String, port: Int, services: [any RegistrableRPCService], interceptors: [any ServerInterceptor] = [],
        onListening: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.onListening = onListening
        self.server = GRPCServer(
            transport: .http2NIOPosix(address: .ipv4(host: host, port: port), transportSecurity: .plaintext), services: services,
            interceptors: interceptors)
    }

    public func run() async throws {
        let (server, onListening) = (self.server, self.onListening)
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await server.serve() }
                // Best effort: a server that never listened (shut down first) fails in serve().
                if let port = try? await server.listeningAddress?.ipv4?.port { onListening(port) }
            }
        } onGracefulShutdown: {
            server.beginGracefulShutdown()
        }
    }

    /// The port the server listens on, once it does (useful with port 0).
    public var listeningPort: Int? {
        get async throws { try await server.listeningAddress?.ipv4?.port }
    }
}
