import IsletMessages
import ServiceLifecycle

/// Runs ``Registry/sweep(invalidatedFor:)`` every `interval` until shutdown: ended and invalidated
/// tokens leave `islet.tokens.v1` (and every service's table) `retention` after they ended (a
/// retention of 0 keeps them), and unscoped keys whose deletion Kafka refused are deleted.
struct TokenSweeper: Service {
    let registry: Registry
    let retention: Duration
    let interval: Duration
    var clock: any WallClock = SystemWallClock()

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                _ = await registry.sweep(invalidatedFor: retention)
                try? await clock.sleep(for: interval)
            }
        }
    }
}
