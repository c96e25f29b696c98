import IsletKafka
import Logging
import Metrics
import ServiceLifecycle

/// Keeps a ``TokenTopicTable`` equal to `islet.tokens.v1`: reads every partition of the topic from its
/// start (a replica, not a group member: every instance holds the whole table) and goes on
/// applying what token-registry writes. Once every partition has been read to its end the first
/// time, `onReady` is called (the service may answer from the table from then on).
///
/// A record that does not decode or validate is logged and counted, never applied: the topic is
/// written only by token-registry, so such a record means a bug or a foreign writer, and the table
/// must not guess.
public struct TokenTableLoader: Service {
    let consumer: KafkaConsumer
    let table: any TokenTopicTable
    let onReady: @Sendable () -> Void
    let logger: Logger
    private let rebuildSeconds: Gauge
    private let tokens: Gauge
    private let applier: TokenRecordApplier

    /// The replica of `topic` a loader reads, fetching with ``fetchWait``.
    public static func replicaConfiguration(
        bootstrapServers: String, topic: String, clientID: String, settings: [String: String]
    ) -> KafkaConsumerConfiguration {
        .replica(bootstrapServers: bootstrapServers, topics: [topic], clientID: clientID, fetchWait: fetchWait, settings: settings)
    }

    /// The token tables' `fetch.wait.max.ms` (unless the settings name one): 50 ms.
    ///
    /// A table is read on the hot path (a token registered just before an activity's first event
    /// should be known when the event arrives), so it waits less than a replica's 100 ms. But not
    /// the hot path's 10 ms: the local broker (tansu 0.6) answers a fetch with what it read of a
    /// partition within the fetch's wait, and at 10 ms that is about one batch per partition.
    /// token-registry writes registrations as they come, a few records per batch, so a table that
    /// fell behind (a restore, a burst) read a few hundred records a second while more were
    /// written, and never caught up: at 1,000,000 registrations the tables stopped at 75–79 %. Read
    /// from its start while such a topic was being written, a replica read 1,557 records in 10 s at
    /// 10 ms, 119–278 at 15–20 ms, and all 620,000 at 25 ms and at 50 ms (docs/operations.md). A
    /// Kafka broker answers as soon as records are there, whatever the wait.
    public static let fetchWait: Duration = .milliseconds(50)

    /// - Parameter service: the service name, a dimension of the metrics.
    public init(consumer: KafkaConsumer, table: any TokenTopicTable, service: String, logger: Logger, onReady: @escaping @Sendable () -> Void = {}) {
        self.consumer = consumer
        self.table = table
        self.logger = logger
        self.onReady = onReady
        self.rebuildSeconds = Gauge(label: "islet_tokens_rebuild_seconds", dimensions: [("service", service)])
        self.tokens = Gauge(label: "islet_tokens_table_size", dimensions: [("service", service)])
        self.applier = TokenRecordApplier(service: service, logger: logger)
    }

    public func run() async throws {
        try await consumer.replay { seconds in
            rebuildSeconds.record(seconds)
            tokens.record(Double(table.count))
            logger.info("token table rebuilt", metadata: ["tokens.count": "\(table.count)", "rebuild.seconds": "\(seconds)"])
            onReady()
        } apply: { message, caughtUp in
            applier.apply(message, to: table)
            if caughtUp { tokens.record(Double(table.count)) }
        }
    }
}
