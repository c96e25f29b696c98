import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// The consumer loop: one group member reading `islet.clicks.v1` and `islet.push-outcomes.v1`,
/// counting each record into the ``StatsStore`` and then marking it processed (at least once;
/// the statistics deduplicate). A record that is not a valid message of its topic goes to the
/// dead-letter topic. This is the whole of what a team needs to subscribe to clicks.
public struct ClickConsumer: Service {
    let consumer: KafkaConsumer
    let deadLetters: DeadLetterWriter
    let store: StatsStore
    let clicksTopic: String
    let onAssigned: @Sendable () -> Void
    let logger: Logger

    public init(
        consumer: KafkaConsumer, deadLetters: DeadLetterWriter, store: StatsStore, clicksTopic: String, logger: Logger,
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
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await consumer.run() }
            for await event in consumer.events {
                switch event {
                case .partitionsAssigned(let partitions):
                    logger.info("partitions assigned", metadata: ["kafka.partitions": "\(partitions)"])
                    onAssigned()
                case .message(let message):
                    try await handle(message)
                case .partitionEnd, .partitionsRevoked:
                    break
                }
            }
            // The events end when the consumer stops (shutdown); anything else is a failure of run().
        }
    }

    private func handle(_ message: KafkaMessage) async throws {
        if message.topic == clicksTopic {
            switch DeadLetterWriter.check(ClickEvent.self, message) {
            case .success(let click): store.record(click)
            case .failure(let rejection):
                try await deadLetters.deadLetter(message, reason: rejection.reason, detail: rejection.detail)
                return
            }
        } else {
            switch DeadLetterWriter.check(PushOutcome.self, message) {
            case .success(let outcome): store.record(outcome)
            case .failure(let rejection):
                try await deadLetters.deadLetter(message, reason: rejection.reason, detail: rejection.detail)
                return
            }
        }
        consumer.markProcessed(message)
    }
}

/// Refreshes the gauges every second and prints the table every ``interval``.
public struct StatsReporter: Service {
    let store: StatsStore
    let interval: Duration
    let output: @Sendable (String) -> Void

    public init(store: StatsStore, interval: Duration, output: @escaping @Sendable (String) -> Void = { print($0) }) {
        self.store = store
        self.interval = interval
        self.output = output
    }

    public func run() async throws {
        var sincePrint = Duration.zero
        while !Task.isShuttingDownGracefully {
            guard (try? await cancelWhenGracefulShutdown({ try await Task.sleep(for: .seconds(1)) })) != nil else { break }
            store.refreshGauges()
            sincePrint += .seconds(1)
            if sincePrint >= interval {
                sincePrint = .zero
                output(store.snapshot.render())
            }
        }
        store.refreshGauges()
        output(store.snapshot.render())
    }
}
