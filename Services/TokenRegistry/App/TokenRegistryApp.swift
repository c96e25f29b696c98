import Hummingbird
import IsletKafka
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle

/// token-registry, assembled: what `main` runs.
public struct TokenRegistryApp: Sendable {
    /// The topics the registry reads and writes (tests use their own).
    public struct Topics: Sendable {
        public var tokens = IsletTopics.tokens.name
        public var pushOutcomes = IsletTopics.pushOutcomes.name
        public var deadLetters = IsletTopics.deadLetters.name
        public init() {}
    }

    public let registry: Registry
    public let producer: KafkaProducer
    public let grpc: GRPCServerService
    /// In start order; ``ServiceRuntime/run(_:)`` stops them in reverse (HTTP first, the producer last).
    public let services: [any Service]

    /// The readiness check that turns ready once the token table is rebuilt.
    public static let tableCheck = "tokens-table"

    public init(runtime: ServiceRuntime, settings: RegistrySettings, topics: Topics = Topics()) async throws {
        let logger = runtime.logger
        let producer = try KafkaProducer(configuration: Self.producerConfiguration(runtime: runtime, settings: settings), logger: logger)
        let registry = await Self.registry(settings: settings, producer: producer, topic: topics.tokens, logger: logger)
        let (replica, loader) = try Self.tableLoader(runtime: runtime, registry: registry, topic: topics.tokens)
        let (outcomes, listener) = try Self.outcomeListener(runtime: runtime, registry: registry, producer: producer, topics: topics)
        let (grpc, listeners) = try await Self.listeners(runtime: runtime, settings: settings, registry: registry)
        Self.registerKafkaHealth(runtime.health, producer: producer, replica: replica, outcomes: outcomes)

        self.registry = registry
        self.producer = producer
        self.grpc = grpc
        let sweeper = TokenSweeper(registry: registry, retention: settings.tokenRetention, interval: .seconds(3_600))
        self.services = [producer, loader, listener, sweeper] + listeners
    }

    /// The producer's configuration: a change the app waits for fails within `sendTimeout` instead
    /// of librdkafka's 30 s default.
    static func producerConfiguration(runtime: ServiceRuntime, settings: RegistrySettings) -> KafkaProducerConfiguration {
        var producerConfiguration = runtime.settings.producerConfiguration()
        if producerConfiguration.settings["message.timeout.ms"] == nil {
            producerConfiguration.settings["message.timeout.ms"] = "\(Int(settings.sendTimeout / .milliseconds(1)))"
        }
        return producerConfiguration
    }

    /// The registry over an empty table, publishing through `producer`; says at start-up which of
    /// its checks are off (no ticket keys, no app list).
    static func registry(settings: RegistrySettings, producer: KafkaProducer, topic: String, logger: Logger) async -> Registry {
        let tickets = settings.ticketKeys.isEmpty ? nil : await ActivityTickets(secrets: settings.ticketKeys, required: settings.ticketsRequired)
        if tickets == nil {
            logger.notice("ISLET_TICKET_HS256_KEYS names no key: the first user to register an activity id owns it (docs/token-registry.md)")
        }
        if settings.apps.isEmpty {
            logger.notice("ISLET_APPS names no app: registrations for any bundle id are taken (docs/token-registry.md)")
        }
        return Registry(
            table: TokenTable(), publisher: KafkaTokenPublisher(producer: producer, topic: topic), logger: logger, quotas: settings.quotas,
            tickets: tickets, apps: settings.apps)
    }

    /// Where an app reads the content of an activity its backend announced (``FirstContent``);
    /// `nil` without `ISLET_CONTENT_HTTP`.
    static func firstContent(settings: RegistrySettings, logger: Logger) async -> FirstContent? {
        guard let content = settings.content, !settings.ticketKeys.isEmpty else { return nil }
        return FirstContent(
            tickets: await ActivityTickets(secrets: settings.ticketKeys, required: true),
            source: ContentServiceClient(host: content.host, port: content.port, key: content.key, logger: logger), apps: settings.apps)
    }

    /// The reader that rebuilds the table from the tokens topic, and keeps it current; the
    /// registry (and ``tableCheck``) turn ready once it caught up.
    static func tableLoader(runtime: ServiceRuntime, registry: Registry, topic: String) throws -> (KafkaConsumer, TokenTableLoader) {
        let logger = runtime.logger
        let replica = try KafkaConsumer(
            configuration: TokenTableLoader.replicaConfiguration(
                bootstrapServers: runtime.settings.kafkaBootstrap, topic: topic, clientID: runtime.settings.serviceName,
                settings: runtime.settings.consumerProperties),
            logger: logger)
        let health = runtime.health
        health.register(Self.tableCheck)
        let loader = TokenTableLoader(consumer: replica, table: registry.topicFeed, service: runtime.settings.serviceName, logger: logger) {
            registry.markReady()
            health.setReady(Self.tableCheck)
        }
        return (replica, loader)
    }

    /// The reader of push outcomes (APNs's verdicts), with its dead-letter writer.
    static func outcomeListener(
        runtime: ServiceRuntime, registry: Registry, producer: KafkaProducer, topics: Topics
    ) throws -> (KafkaConsumer, OutcomeListener<KafkaConsumer>) {
        let logger = runtime.logger
        // An invalidation must show within a second, not within the hot path's 10 ms: a longer fetch
        // wait spares the broker a fetch every 10 ms.
        var outcomesConfiguration = runtime.settings.consumerConfiguration(topics: [topics.pushOutcomes])
        outcomesConfiguration.preferFetchWait(.milliseconds(100))
        let outcomes = try KafkaConsumer(configuration: outcomesConfiguration, logger: logger)
        let listener = OutcomeListener(
            consumer: outcomes, deadLetters: DeadLetterWriter(
                producer: producer, consumer: outcomes, service: runtime.settings.serviceName, logger: logger, topic: topics.deadLetters),
            registry: registry, logger: logger)
        return (outcomes, listener)
    }

    /// The API's listeners, in start order: gRPC for backends, the operator port, the app port.
    /// (scripts/check_doc_examples.py reads the routes and listeners from this one function.)
    static func listeners(
        runtime: ServiceRuntime, settings: RegistrySettings, registry: Registry
    ) async throws -> (GRPCServerService, [any Service]) {
        let logger = runtime.logger
        let authenticator = try await Authenticator(settings: settings)
        // Phones reach the app port: /health and the API there; /metrics on the operator listener.
        let router = runtime.makeAppRouter()
        router.add(middleware: MetricsMiddleware())
        RegistryHTTPAPI(
            registry: registry, authenticator: authenticator, maxBodyBytes: settings.maxBodyBytes, logger: logger,
            firstContent: await Self.firstContent(settings: settings, logger: logger)
        ).addRoutes(to: router)
        if settings.backendKeys.isEmpty { logger.warning("ISLET_GRPC_KEYS names no backend: the gRPC API refuses every call") }
        let grpc = GRPCServerService(
            host: settings.grpcHost, port: settings.grpcPort, services: [RegistryGRPCService(registry: registry)],
            interceptors: [BackendAuthInterceptor(keys: settings.backendKeys, permissions: BackendAuthInterceptor.tokenRegistryMethods)],
            onListening: { ListenerReport.bound("grpc", port: $0) })
        let services: [any Service] = [
            runtime.listener(grpc, name: "grpc", host: settings.grpcHost, port: settings.grpcPort, variables: ["ISLET_GRPC_HOST", "ISLET_GRPC_PORT"]),
            runtime.operatorServer(router: runtime.makeRouter().buildResponder()),
            runtime.httpServer(router: router.buildResponder()),
        ]
        return (grpc, services)
    }

    /// Readiness follows the Kafka clients too: not ready while one cannot reach the cluster or is
    /// being recreated; not live once recreation keeps failing.
    static func registerKafkaHealth(_ health: HealthRegistry, producer: KafkaProducer, replica: KafkaConsumer, outcomes: KafkaConsumer) {
        health.register("kafka.producer") { producer.health }
        health.register("kafka.tokens") { replica.health }
        health.register("kafka.outcomes") { outcomes.health }
    }
}
