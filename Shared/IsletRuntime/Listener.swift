import ServiceLifecycle

/// Runs a listening service (an HTTP or gRPC server) and turns the failure to bind its socket into
/// a ``ListenerBindError`` naming the address and the variables that set it; any other error passes
/// unchanged. ``ServiceRuntime`` wraps its HTTP listeners in one; wrap a gRPC server with
/// ``ServiceRuntime/listener(_:name:host:port:variables:)``.
public struct Listener<Base: Service>: Service {
    let base: Base
    let name: String
    let host: String
    let port: Int
    let variables: [String]

    public init(_ base: Base, name: String, host: String, port: Int, variables: [String]) {
        self.base = base
        self.name = name
        self.host = host
        self.port = port
        self.variables = variables
    }

    public func run() async throws {
        do {
            try await base.run()
        } catch {
            guard let reason = Self.bindFailure(in: error, port: port) else { throw error }
            throw ListenerBindError(listener: name, host: host, port: port, variables: variables, reason: reason)
        }
    }

    /// The error itself, or one it wraps (grpc-swift reports the transport's error as the `cause`
    /// of its own): the first that is a bind failure.
    static func bindFailure(in error: any Error, port: Int) -> String? {
        var next: Any? = error
        for _ in 0..<4 {
            guard let error = next as? any Error else { return nil }
            if let reason = ListenerBindError.reason(for: error, port: port) { return reason }
            next = Mirror(reflecting: error).descendant("cause")
        }
        return nil
    }
}

extension ServiceRuntime {
    /// `service` (a server listening on `host`:`port`) as a ``Listener``: a failure to bind names the
    /// address and `variables`.
    public func listener<Base: Service>(_ service: Base, name: String, host: String, port: Int, variables: [String]) -> Listener<Base> {
        Listener(service, name: name, host: host, port: port, variables: variables)
    }
}
