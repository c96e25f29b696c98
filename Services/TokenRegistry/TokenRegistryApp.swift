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
        var producerConfiguration = runtime.settings.producerConfiguration()
        // A change the app waits for fails within sendTimeout instead of librdkafka's 30 s default.
        if producerConfiguration.settings["message.timeout.ms"] == nil {
            producerConfiguration.settings["message.timeout.ms"] = "\(Int(settings.sendTimeout / .milliseconds(1)))"
        }
        let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
        let tickets = settings.ticketKeys.isEmpty ? nil : await ActivityTickets(secrets: settings.ticketKeys, required: settings.ticketsRequired)
        if tickets == nil {
            logger.notice("ISLET_TICKET_HS256_KEYS names no key: the first user to register an activity id owns it (docs/token-registry.md)")
        }
        if settings.apps.isEmpty {
            logger.notice("ISLET_APPS names no app: registrations for any bundle id are taken (docs/token-registry.md)")
        }
        let registry = Registry(
            table: TokenTable(), publisher: KafkaTokenPublisher(producer: producer, topic: topics.tokens), logger: logger, quotas: settings.quotas,
            tickets: tickets, apps: settings.apps)

        let replica = try KafkaConsumer(
            configuration: TokenTableLoader.replicaConfiguration(
                bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.tokens, clientID: runtime.settings.serviceName,
                settings: runtime.settings.consumerProperties),
            logger: logger)
        let health = runtime.health
        health.register(Self.tableCheck)
        let loader = TokenTableLoader(consumer: replica, table: registry.topicFeed, service: runtime.settings.serviceName, logger: logger) {
            registry.markReady()
            health.setReady(Self.tableCheck)
        }

        // An invalidation must show within a second, not within the hot path's 10 ms: a longer fetch
        // wait spares the broker a fetch every 10 ms.
        var outcomesConfiguration = runtime.settings.consumerConfiguration(topics: [topics.pushOutcomes])
        outcomesConfiguration.preferFetchWait(.milliseconds(100))
        let outcomes = try KafkaConsumer(configuration: outcomesConfiguration, logger: logger)
        let listener = OutcomeListener(
            consumer: outcomes, deadLetters: DeadLetterWriter(
                producer: producer, consumer: outcomes, service: runtime.settings.serviceName, logger: logger, topic: topics.deadLetters),
            registry: registry, logger: logger)

        let authenticator = try await Authenticator(settings: settings)
        // Phones reach the app port: /health and the API there; /metrics on the operator listener.
        let router = runtime.makeAppRouter()
        router.add(middleware: MetricsMiddleware())
        RegistryHTTPAPI(registry: registry, authenticator: authenticator, maxBodyBytes: settings.maxBodyBytes, logger: logger).addRoutes(to: router)
        if settings.backendKeys.isEmpty { logger.warning("ISLET_GRPC_KEYS names no backend: the gRPC API refuses every call") }
        let grpc = GRPCServerService(
            host: settings.grpcHost, port: settings.grpcPort, services: [RegistryGRPCService(registry: registry)],
            interceptors: [BackendAuthInterceptor(keys: settings.backendKeys, permissions: BackendAuthInterceptor.tokenRegistryMethods)],
            onListening: { ListenerReport.bound("grpc", port: $0) })

        // Readiness follows the Kafka clients too: not ready while one cannot reach the cluster or
        // is being recreated; not live once recreation keeps failing.
        health.register("kafka.producer") { producer.health }
        health.register("kafka.tokens") { replica.health }
        health.register("kafka.outcomes") { outcomes.health }

        self.registry = registry
        self.producer = producer
        self.grpc = grpc
        let sweeper = TokenSweeper(registry: registry, retention: settings.tokenRetention, interval: .seconds(3_600))
        self.services = [
            producer, loader, listener, sweeper,
            runtime.listener(grpc, name: "grpc", host: settings.grpcHost, port: settings.grpcPort, variables: ["ISLET_GRPC_HOST", "ISLET_GRPC_PORT"]),
            runtime.operatorServer(router: runtime.makeRouter().buildResponder()),
            runtime.httpServer(router: router.buildResponder()),
        ]
    }
}
