import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import Logging
import Prometheus
import ServiceLifecycle

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
