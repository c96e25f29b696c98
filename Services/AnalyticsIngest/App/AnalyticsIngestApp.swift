import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import Logging
import Prometheus
import ServiceLifecycle

/// analytics-ingest, assembled: what `main` runs.
public struct AnalyticsIngestApp: Sendable {
    /// The topics it writes (tests use their own).
    public struct Topics: Sendable {
        public var clicks = IsletTopics.clicks.name
        public var clicksRejected = IsletTopics.clicksRejected.name
        public init() {}
    }

    public let producer: KafkaProducer
    public let ingestor: Ingestor
    public let metrics: IngestMetrics
    /// The HTTP routes (the server in ``services`` serves them; tests can call them in process).
    public let responder: RouterResponder<IngestRequestContext>
    /// In start order; ``ServiceRuntime/run(_:)`` stops them in reverse (HTTP first, the producer last).
    public let services: [any Service]

    public init(runtime: ServiceRuntime, settings: IngestSettings, topics: Topics = Topics()) throws {
        let logger = runtime.logger
        var producerConfiguration = runtime.settings.producerConfiguration()
        // A tap the app waits for fails within sendTimeout instead of after the 30 s default: the
        // producer ends the wait at sendTimeout itself (librdkafka's message.timeout.ms overshoots
        // by a second or more with a broker that stopped answering), the record's fate unknown
        // (the app retries; a tap written twice has one clickId).
        if producerConfiguration.settings["message.timeout.ms"] == nil {
            producerConfiguration.settings["message.timeout.ms"] = "\(Int(settings.sendTimeout / .milliseconds(1)))"
        }
        producerConfiguration.sendTimeout = settings.sendTimeout
        let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
        // Into the runtime's own registry, so /metrics shows them with or without a global bootstrap.
        let metrics = IngestMetrics(factory: PrometheusMetricsFactory(registry: runtime.metrics))
        // One bucket for the whole instance: rejected taps written per second at most.
        let rejectedSample = RateLimiter(
            ratePerSecond: Double(max(settings.rejectedPerSecond, 1)), burst: Double(max(settings.rejectedPerSecond, 1)), maxClients: 1,
            clock: ContinuousClock())
        let recordsRejected = settings.rejectedPerSecond > 0
        let ingestor = Ingestor(
            verifier: TapVerifier(keyring: settings.keyring, maxTapAge: settings.maxTapAge),
            recent: RecentTaps(capacity: settings.recentTaps),
            publisher: KafkaTapPublisher(producer: producer, clicksTopic: topics.clicks, rejectedTopic: topics.clicksRejected),
            metrics: metrics, logger: logger,
            recordRejected: { recordsRejected && rejectedSample.admit("rejected") == .allowed })
        let limiter = RateLimiter(
            ratePerSecond: settings.ratePerSecond, burst: settings.rateBurst, maxClients: settings.rateClients, clock: ContinuousClock())

        // Phones reach the app port: /health and the API there; /metrics on the operator listener.
        let router = runtime.makeAppRouter(context: IngestRequestContext.self)
        router.add(middleware: MetricsMiddleware())
        IngestHTTPAPI(ingestor: ingestor, limiter: limiter, settings: settings, metrics: metrics, logger: logger).addRoutes(to: router)

        // Readiness follows the Kafka producer: not ready while the producer cannot reach the cluster or
        // is being recreated; not live once recreation keeps failing.
        runtime.health.register("kafka.producer") { producer.health }

        self.producer = producer
        self.ingestor = ingestor
        self.metrics = metrics
        self.responder = router.buildResponder()
        self.services = [producer, runtime.operatorServer(router: runtime.makeRouter().buildResponder()), runtime.httpServer(router: responder)]
    }
}
