import ServiceLifecycle

/// Runs ``Registry/sweep(invalidatedFor:)`` every `interval` until shutdown: ended and invalidated
/// tokens leave `islet.tokens.v1` (and every service's table) `retention` after they ended.
struct TokenSweeper: Service {
    let registry: Registry
    let retention: Duration
    let interval: Duration

    func run() async throws {
        guard retention > .zero else { return }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                _ = await registry.sweep(invalidatedFor: retention)
                try? await Task.sleep(for: interval)
            }
        }
    }
}
