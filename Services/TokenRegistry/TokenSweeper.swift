import ServiceLifecycle

/// Runs ``Registry/sweep(invalidatedFor:)`` every `interval` until shutdown: ended and invalidated
/// tokens leave `islet.tokens.v1` (and every service's table) `retention` after they ended.
struct TokenSweeper: Service {
    let registry: Registry
    let retention: Duration
    let interval: Duration

    func run() async throws {
        guard retention > .zero else {
            // Nothing to sweep; a service that returned early would end the whole group.
            try await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                _ = await registry.sweep(invalidatedFor: retention)
                try? await Task.sleep(for: interval)
            }
        }
    }
}
