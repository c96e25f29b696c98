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
