import ServiceLifecycle

/// Starts a service only once a readiness check is ready: a service that judges input against a
/// table rebuilt from a topic must not start on a half-built one. Shut down before that, it
/// returns without starting the service.
public struct ReadinessGate<Wrapped: Service>: Service {
    let health: HealthRegistry
    let check: String
    let wrapped: Wrapped

    public init(health: HealthRegistry, check: String, then wrapped: Wrapped) {
        self.health = health
        self.check = check
        self.wrapped = wrapped
    }

    public func run() async throws {
        while health.report().checks[check] != .ready {
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(50)) }) != nil else { return }
        }
        try await wrapped.run()
    }
}
