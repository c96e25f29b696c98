import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// Reads `islet.push-outcomes.v1` in the registry's consumer group and invalidates the tokens
/// APNs declared dead (``Registry/decide(_:current:)`` has the rule). An outcome is marked
/// processed only once its invalidation is acknowledged by Kafka (or it needed none); while Kafka
/// refuses, the same outcome is retried with backoff. Outcomes wait until the token table is
/// rebuilt: a decision against a half-built table would be wrong.
public struct OutcomeListener<Source: MessageSource>: Service {
    let consumer: Source
    let deadLetters: DeadLetterWriter
    let registry: Registry
    let logger: Logger
    /// What the retries' backoff waits on.
    let clock: any WallClock

    public init(consumer: Source, deadLetters: DeadLetterWriter, registry: Registry, logger: Logger, clock: any WallClock = SystemWallClock()) {
        self.clock = clock
        self.consumer = consumer
        self.deadLetters = deadLetters
        self.registry = registry
        self.logger = logger
    }

    public func run() async throws {
        // Join the group only once the table is complete.
        while !registry.isReady {
            // Shut down before the table was ready: nothing to stop.
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(50)) }) != nil else { return }
        }
        try await consumer.consume(PushOutcome.self, deadLetters: deadLetters) { outcome in
            // Retried until Kafka persists the invalidation: the outcome is marked processed only then.
            var backoff = Duration.milliseconds(100)
            while true {
                do {
                    _ = try await registry.handle(outcome)
                    return
                } catch {
                    logger.warning(
                        "invalidation not persisted; retrying",
                        metadata: ["outcome.requestId": "\(outcome.requestId)", "error": "\(error)", "retry.in": "\(backoff)"])
                    let delay = backoff
                    try await cancelWhenGracefulShutdown { try await clock.sleep(for: delay) }
                    backoff = min(backoff * 2, .seconds(5))
                }
            }
        }
    }
}
