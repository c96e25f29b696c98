import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import Logging
import Prometheus
import ServiceLifecycle

/// analytics-consumer's own settings (besides ``ServiceSettings``), from the environment.
public struct AnalyticsConsumerSettings: Sendable {
    /// `ISLET_ANALYTICS_GROUP` (default `analytics-consumer`): the consumer group. Instances of one
    /// group share the partitions (each counts its share); another group reads everything again.
    public var group: String
    /// `ISLET_ANALYTICS_REPORT_INTERVAL_MS` (default 10000): how often the table is printed.
    public var reportInterval: Duration
    /// `ISLET_ANALYTICS_STATS_CAPACITY` (default 100000): cells, activities and ids remembered at most.
    public var capacity: Int

    public init(group: String = "analytics-consumer", reportInterval: Duration = .seconds(10), capacity: Int = 100_000) {
        self.group = group
        self.reportInterval = reportInterval
        self.capacity = capacity
    }

    public init(from config: IsletConfig) throws(ConfigurationError) {
        self.init(
            group: try config.string("islet.analytics.group", default: "analytics-consumer"),
            reportInterval: try config.milliseconds("islet.analytics.report.interval.ms", default: .seconds(10)),
            capacity: try config.int("islet.analytics.stats.capacity", default: 100_000, range: 1...10_000_000))
    }
}

/// analytics-consumer, assembled: what `main` runs.
public struct AnalyticsConsumerApp: Sendable {
    public struct Topics: Sendable {
        public var clicks = IsletTopics.clicks.name
        public var pushOutcomes = IsletTopics.pushOutcomes.name
        public var deadLetters = IsletTopics.deadLetters.name
        public init() {}
    }

    public let store: StatsStore
    public let services: [any Service]
    /// The readiness check that turns ready once the group assigned partitions to this member.
    public static let assignedCheck = "partitions-assigned"

    public init(
        runtime: ServiceRuntime, settings: AnalyticsConsumerSettings, topics: Topics = Topics(),
        output: @escaping @Sendable (String) -> Void = { print($0) }
    ) throws {
        let logger = runtime.logger
        let store = StatsStore(capacity: settings.capacity, factory: PrometheusMetricsFactory(registry: runtime.metrics))
        let producer = try KafkaProducer(configuration: runtime.settings.producerConfiguration(), logger: logger)
        let consumer = try KafkaConsumer(
            configuration: runtime.settings.consumerConfiguration(topics: [topics.clicks, topics.pushOutcomes], group: settings.group),
            logger: logger)
        let health = runtime.health
        health.register(Self.assignedCheck)
        let loop = ClickConsumer(
            consumer: consumer,
            deadLetters: DeadLetterWriter(
                producer: producer, consumer: consumer, service: runtime.settings.serviceName, logger: logger, topic: topics.deadLetters),
            store: store, clicksTopic: topics.clicks, logger: logger,
            onAssigned: { health.setReady(Self.assignedCheck) })
        // Readiness follows the Kafka clients too: not ready while one cannot reach the cluster or
        // is being recreated; not live once recreation keeps failing.
        health.register("kafka.producer") { producer.health }
        health.register("kafka.consumer") { consumer.health }
        let router = runtime.makeRouter()
        self.store = store
        self.services = [
            producer, loop, StatsReporter(store: store, interval: settings.reportInterval, output: output),
            runtime.httpServer(router: router.buildResponder()),
        ]
    }
}
