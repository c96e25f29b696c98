import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// The consumer loop: one group member reading `islet.clicks.v1` and `islet.push-outcomes.v1`,
/// counting each record into the ``StatsStore`` and then marking it processed (at least once;
/// the statistics deduplicate). A record that is not a valid message of its topic goes to the
/// dead-letter topic. This is the whole of what a team needs to subscribe to clicks.
public struct ClickConsumer<Source: MessageSource>: Service {
    let consumer: Source
    let deadLetters: DeadLetterWriter
    let store: StatsStore
    let clicksTopic: String
    let onAssigned: @Sendable () -> Void
    let logger: Logger

    public init(
        consumer: Source, deadLetters: DeadLetterWriter, store: StatsStore, clicksTopic: String, logger: Logger,
        onAssigned: @escaping @Sendable () -> Void = {}
    ) {
        self.consumer = consumer
        self.deadLetters = deadLetters
        self.store = store
        self.clicksTopic = clicksTopic
        self.logger = logger
        self.onAssigned = onAssigned
    }

    public func run() async throws {
        try await consumer.consumeRecords(deadLetters: deadLetters) { partitions in
            logger.info("partitions assigned", metadata: ["kafka.partitions": "\(partitions)"])
            onAssigned()
        } handle: { message in
            if message.topic == clicksTopic {
                DeadLetterWriter.check(ClickEvent.self, message).map { store.record($0) }
            } else {
                DeadLetterWriter.check(PushOutcome.self, message).map { store.record($0) }
            }
        }
    }
}
