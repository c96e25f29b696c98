import Foundation
import GRPCCore
import Hummingbird
import IsletKafka
import IsletLinks
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

/// content-service, assembled: what `main` runs.
public struct ContentServiceApp: Sendable {
    public struct Topics: Sendable {
        public var tokens = IsletTopics.tokens.name
        public var activityEvents = IsletTopics.activityEvents.name
        public var pushRequests = IsletTopics.pushRequests.name
        public var pushOutcomes = IsletTopics.pushOutcomes.name
        public var contentMemory = IsletTopics.contentMemory.name
        public var deadLetters = IsletTopics.deadLetters.name
        public init() {}
    }

    public static let tableCheck = "tokens-table"
    public static let memoryCheck = "activity-memory"

    /// The service's producer: `message.timeout.ms` is the send timeout, and `linger.ms` is 1
    /// instead of Islet's 5, because push requests are on the path from a domain event to the lock
    /// screen (PERFORMANCE.md, end-to-end latency). What the operator set in
    /// `ISLET_KAFKA_PRODUCER_PROPERTIES` wins.
    public static func producerConfiguration(_ base: KafkaProducerConfiguration, sendTimeout: Duration) -> KafkaProducerConfiguration {
        var configuration = base
        if configuration.settings["message.timeout.ms"] == nil {
            configuration.settings["message.timeout.ms"] = "\(Int(sendTimeout / .milliseconds(1)))"
        }
        if configuration.settings["linger.ms"] == nil { configuration.settings["linger.ms"] = "1" }
        return configuration
    }

    public let engine: ContentEngine
    public let monitor: FreshnessMonitor
    public let grpc: GRPCServerService
    public let services: [any Service]

    public init(runtime: ServiceRuntime, settings: ContentSettings, topics: Topics = Topics()) throws {
        let (logger, service, health) = (runtime.logger, runtime.settings.serviceName, runtime.health)
        let templates = try TemplateLoader.load(directory: settings.templatesDirectory)
        logger.info("templates loaded", metadata: ["templates": "\(templates.keys.sorted())"])
        let producer = try KafkaProducer(
            configuration: Self.producerConfiguration(runtime.settings.producerConfiguration(), sendTimeout: settings.sendTimeout), logger: logger)
        // Once the token table's first load is complete, devices it reads are devices that may
        // have missed their activity's latest content (ContentEngine.watchLateDevices).
        let loaded = EngineHook()
        let table = try Self.tokenTable(runtime: runtime, topic: topics.tokens) { loaded.engine.withLock { $0?.watchLateDevices() } }
        // The activities' memory, from the service's own output and the dispatcher's answers.
        let engine = ContentEngine(
            assembler: PayloadAssembler(templates: templates, keyring: settings.keyring, policy: settings.policy), tokens: table.tokens,
            freshness: settings.freshness)
        loaded.engine.withLock { $0 = engine }
        let sender = RequestSender(producer: producer, engine: engine, topic: topics.pushRequests, metrics: ContentMetrics(), logger: logger)
        let (memoryLoader, changelog) = Self.memory(runtime: runtime, settings: settings, topics: topics, engine: engine, sender: sender, producer: producer)
        let consumer = try KafkaConsumer(configuration: runtime.settings.consumerConfiguration(topics: [topics.activityEvents]), logger: logger)
        let thumbnails = settings.thumbnails.allowedHosts.isEmpty ? nil : ThumbnailService(settings: settings.thumbnails, metrics: sender.metrics, logger: logger)
        let loop = ContentServiceLoop(
            consumer: consumer,
            deadLetters: DeadLetterWriter(producer: producer, consumer: consumer, service: service, logger: logger, topic: topics.deadLetters),
            engine: engine, sender: sender, thumbnails: thumbnails, changelog: changelog, memory: memoryLoader, logger: logger)
        let monitor = Self.monitor(runtime: runtime, settings: settings, topics: topics, engine: engine, sender: sender)
        let lookup = Self.lookup(runtime: runtime, topics: topics, memory: memoryLoader, sender: sender)
        let intake = EventIntake(
            engine: engine, producer: producer, topic: topics.activityEvents, isReady: { Self.isReady(health.report().checks) }, lookup: lookup)
        let grpc = Self.grpcServer(settings: settings, intake: intake, logger: logger)
        // The backends' HTTP API, beside /health and /metrics.
        let router = runtime.makeRouter()
        ActivityHTTPAPI(
            intake: intake, keys: settings.backendKeys, maxBodyBytes: settings.maxBodyBytes,
            lookup: lookup, peers: Self.peers(runtime: runtime, settings: settings, metrics: sender.metrics), metrics: sender.metrics
        ).addRoutes(to: router)
        // The stale list names activities: on the operator listener (loopback unless
        // ISLET_OPERATOR_HOST says otherwise), not on the HTTP port orchestrators probe.
        let operatorRouter = runtime.makeRouter()
        operatorRouter.get("v1/activities/stale") { request, _ in try Self.staleList(request, engine: engine) }
        // Readiness follows the Kafka clients too: not ready while one cannot reach the cluster or
        // is being recreated; not live once recreation keeps failing.
        health.register("kafka.producer") { producer.health }
        health.register("kafka.tokens") { table.replica.health }
        health.register("kafka.memory") { memoryLoader.health }
        health.register("content-memory.changelog") { changelog.failure.map { .notReady("the changelog is behind: \($0)") } ?? .ready }
        health.register("kafka.events") { consumer.health }

        self.engine = engine
        self.monitor = monitor
        self.grpc = grpc
        self.services = (thumbnails.map { [$0] } ?? []) + [
            producer, table.loader, memoryLoader,
            ReadinessGate(health: health, check: Self.memoryCheck, then: changelog),
            ReadinessGate(health: health, check: Self.tableCheck, then: ReadinessGate(health: health, check: Self.memoryCheck, then: loop)),
            ReadinessGate(health: health, check: Self.memoryCheck, then: monitor),
            ReadinessGate(health: health, check: Self.memoryCheck, then: StepSender(engine: engine, sender: sender, logger: logger)),
            runtime.listener(grpc, name: "grpc", host: settings.grpcHost, port: settings.grpcPort, variables: ["ISLET_GRPC_HOST", "ISLET_GRPC_PORT"]),
            runtime.httpServer(router: router.buildResponder()),
            runtime.operatorServer(router: operatorRouter.buildResponder()),
        ]
    }

    /// The backends' gRPC API.
    private static func grpcServer(settings: ContentSettings, intake: EventIntake, logger: Logger) -> GRPCServerService {
        if settings.backendKeys.isEmpty { logger.warning("ISLET_GRPC_KEYS names no backend: the gRPC and HTTP APIs refuse every call") }
        return GRPCServerService(
            host: settings.grpcHost, port: settings.grpcPort, services: [ActivityGRPCService(intake: intake)],
            interceptors: [BackendAuthInterceptor(keys: settings.backendKeys, permissions: BackendAuthInterceptor.activityServiceMethods)],
            onListening: { ListenerReport.bound("grpc", port: $0) })
    }

    /// Whether the token table and the memory are read: events are taken only then.
    static func isReady(_ checks: [String: HealthRegistry.Status]) -> Bool {
        checks[tableCheck] == .ready && checks[memoryCheck] == .ready
    }

    /// The token table (which app, version and environment an activity has): the whole topic,
    /// compact. content-service looks up tokens of activities whose partitions it does not own
    /// (a remote start's push-to-start token, an event checked through the gRPC API).
    private static func tokenTable(runtime: ServiceRuntime, topic: String, loaded: @escaping @Sendable () -> Void) throws
        -> (tokens: PartitionTokens, replica: KafkaConsumer, loader: TokenTableLoader)
    {
        let (logger, service, health) = (runtime.logger, runtime.settings.serviceName, runtime.health)
        let tokens = PartitionTokens.whole(fingerprintsOnly: true)
        health.register(Self.tableCheck)
        let replica = try KafkaConsumer(
            configuration: TokenTableLoader.replicaConfiguration(
                bootstrapServers: runtime.settings.kafkaBootstrap, topic: topic, clientID: service, settings: runtime.settings.consumerProperties),
            logger: logger)
        let loader = TokenTableLoader(consumer: replica, table: tokens, service: service, logger: logger) {
            health.setReady(Self.tableCheck)
            loaded()
        }
        return (tokens, replica, loader)
    }

    /// The memories of the partitions assigned, read from the changelog and the topics after it;
    /// and the changelog: the memories that changed, written every few seconds, and when
    /// partitions are revoked.
    private static func memory(
        runtime: ServiceRuntime, settings: ContentSettings, topics: Topics, engine: ContentEngine, sender: RequestSender, producer: KafkaProducer
    ) -> (ContentMemoryLoader, ContentChangelog) {
        let (logger, service, health) = (runtime.logger, runtime.settings.serviceName, runtime.health)
        health.register(Self.memoryCheck)
        let (bootstrap, consumerProperties) = (runtime.settings.kafkaBootstrap, runtime.settings.consumerProperties)
        let loader = ContentMemoryLoader(
            engine: engine, requestsTopic: topics.pushRequests, outcomesTopic: topics.pushOutcomes, changelogTopic: topics.contentMemory,
            since: engine.clock.date.addingTimeInterval(-(settings.freshness.retention / .seconds(1))), ownWrites: sender.writer, metrics: sender.metrics,
            logger: logger,
            readEnds: ContentMemoryLoader.ends(bootstrapServers: bootstrap, clientID: service, settings: runtime.settings.producerProperties, logger: logger),
            makeReplica: ContentMemoryLoader.replicas(bootstrapServers: bootstrap, clientID: service, settings: consumerProperties, logger: logger)
        ) { health.setReady(Self.memoryCheck) }
        let changelog = ContentChangelog(
            engine: engine, sender: sender, producer: producer, positions: loader.positions, topic: topics.contentMemory,
            interval: settings.changelogInterval, logger: logger)
        return (loader, changelog)
    }

    /// The freshness monitor, with token-registry's invalidation when it is configured.
    private static func monitor(
        runtime: ServiceRuntime, settings: ContentSettings, topics: Topics, engine: ContentEngine, sender: RequestSender
    ) -> FreshnessMonitor {
        let logger = runtime.logger
        if settings.registry == nil {
            logger.notice("ISLET_REGISTRY_GRPC is not set: activities the freshness monitor ends keep their token active until the app ends them")
        }
        let invalidator = settings.registry.map { RegistryInvalidator(host: $0.host, port: $0.port, key: $0.key) }
        let payloads = RequestPayloads(
            bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushRequests, settings: runtime.settings.consumerProperties,
            metrics: sender.metrics, logger: logger)
        return FreshnessMonitor(
            engine: engine, sender: sender, metrics: sender.metrics, logger: logger, invalidator: invalidator, payloads: payloads,
            outcomesTopic: topics.pushOutcomes)
    }

    /// Questions about an activity are answered where its memory is (the owner of its partition),
    /// its latest outcomes read again from where the memory saw them.
    private static func lookup(runtime: ServiceRuntime, topics: Topics, memory: ContentMemoryLoader, sender: RequestSender) -> ActivityLookup {
        let outcomes = OutcomeReader(
            bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushOutcomes, settings: runtime.settings.consumerProperties,
            metrics: sender.metrics, logger: runtime.logger)
        // A backend (or token-registry, for an app, which waits 5 s) waits for the answer: 3 s, not
        // the monitor's 30; at most 4 reads at once (each is a Kafka consumer), more are refused.
        let payloads = RequestPayloads(
            bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushRequests, settings: runtime.settings.consumerProperties,
            timeout: .seconds(3), metrics: sender.metrics, logger: runtime.logger)
        let admission = Admission(limit: OutcomeReader.maximumLookups)
        return ActivityLookup(
            partition: { activityId in memory.activityPartitionCount.map { KafkaPartitioner.partition(ofKey: activityId, partitions: $0) } },
            owned: { sender.ownedPartitions }, readOutcomes: { positions throws(ActivityLookup.Unavailable) in try await outcomes.read(positions) },
            readRequest: { position, requestId throws(ActivityLookup.Unavailable) in
                guard admission.enter() else { throw ActivityLookup.Unavailable("too many content lookups at once in this instance: retry in a moment") }
                defer { admission.leave() }
                let wanted = ContentEngine.PayloadToRead(activityKey: requestId, position: position, requestId: requestId)
                let answer = await payloads.read([wanted])
                if let found = answer.found[requestId] { return found.request }
                guard !answer.lost.isEmpty else { throw ActivityLookup.Unavailable("the latest payload could not be read from Kafka now") }
                return nil
            })
    }

    /// The other instances, when there are: a call about an activity another owns is asked there.
    /// A forwarded event waits for Kafka's acknowledgement at the owner: longer than that.
    private static func peers(runtime: ServiceRuntime, settings: ContentSettings, metrics: ContentMetrics) -> PeerForwarding? {
        settings.peers.isEmpty
            ? nil
            : PeerForwarding(
                peers: settings.peers, ownPort: runtime.settings.httpPort, timeout: settings.sendTimeout + .seconds(1), metrics: metrics, logger: runtime.logger)
    }

    /// `GET /v1/activities/stale` on the operator listener.
    private static func staleList(_ request: Request, engine: ContentEngine) throws -> Response {
        let limit = request.uri.queryParameters.get("limit", as: Int.self) ?? 1_000
        let stale = engine.staleActivities(limit: min(max(limit, 1), 1_000)).map(StaleActivityJSON.init)
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try IsletJSON.encode(["activities": stale]))))
    }
}

/// A stale activity as `GET /v1/activities/stale` lists it.
struct StaleActivityJSON: Encodable {
    var activityId: String
    var bundleId: String
    var attributesType: String
    var freshness: String
    var staleSince: Date
    var contentSequence: Int64
    var resends: Int

    init(_ stale: StaleActivity) {
        activityId = stale.activityId
        bundleId = stale.bundleId
        attributesType = stale.attributesType
        freshness = stale.freshness.rawValue
        staleSince = stale.staleSince
        contentSequence = stale.contentSequence
        resends = stale.resends
    }
}

/// The engine, once made, for the token table's loader (made before it) to tell.
private final class EngineHook: Sendable {
    let engine = Mutex<ContentEngine?>(nil)
}
