import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// Reads `islet.push-outcomes.v1` in the registry's consumer group and invalidates the tokens
/// APNs declared dead (``Registry/decide(_:current:)`` has the rule). An outcome is marked
/// processed only once its invalidation is acknowledged by Kafka (or it needed none); while Kafka
/// refuses, the same outcome is retried with backoff. Outcomes wait until the token table is
/// rebuilt: a decision against a half-built table would be wrong.
public struct OutcomeListener: Service {
    let consumer: KafkaConsumer
    let deadLetters: DeadLetterWriter
    let registry: Registry
    let logger: Logger

    public init(consumer: KafkaConsumer, deadLetters: DeadLetterWriter, registry: Registry, logger: Logger) {
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
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await consumer.run() }
            for try await event in consumer.decoded(as: PushOutcome.self, deadLetters: deadLetters) {
                if case .deadLettered(let raw) = event { consumer.markProcessed(raw) }  // one at a time: in order
                guard case .message(let outcome, let raw) = event else { continue }
                var backoff = Duration.milliseconds(100)
                while true {
                    do {
                        try await registry.handle(outcome)
                        break
                    } catch {
                        logger.warning(
                            "invalidation not persisted; retrying",
                            metadata: ["outcome.requestId": "\(outcome.requestId)", "error": "\(error)", "retry.in": "\(backoff)"])
                        let delay = backoff
                        try await cancelWhenGracefulShutdown { try await Task.sleep(for: delay) }
                        backoff = min(backoff * 2, .seconds(5))
                    }
                }
                consumer.markProcessed(raw)
            }
            consumer.shutdown()
        }
    }
}
