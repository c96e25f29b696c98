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

/// content-service's own settings (besides ``ServiceSettings``), from the environment.
public struct ContentSettings: Sendable {
    /// `ISLET_TEMPLATES_DIR` (default `Services/ContentService/Templates`): the template files.
    public var templatesDirectory: String
    /// `ISLET_LINK_KEYS` (`kid=secret,…`, secrets of at least 32 bytes) and
    /// `ISLET_LINK_SIGNING_KEY` (the kid to sign with; needed when there are several).
    public var keyring: LinkKeyring
    public var policy: ContentPolicy
    public var freshness: FreshnessPolicy
    /// `ISLET_GRPC_HOST` (default `127.0.0.1`: the backends' API is not for the open network) and
    /// `ISLET_GRPC_PORT` (default 9083): the `ActivityService` API.
    public var grpcHost: String
    public var grpcPort: Int
    /// `ISLET_GRPC_KEYS`: the backends that may call the gRPC API and the HTTP API,
    /// `name=key:read+write,…` (``BackendKeys``). None: every call is refused.
    public var backendKeys: BackendKeys
    /// `ISLET_HTTP_MAX_BODY_BYTES` (default 65536): the largest body the HTTP API reads.
    public var maxBodyBytes = 65_536
    /// `ISLET_KAFKA_SEND_TIMEOUT_MS` (default 5000): how long a record may wait for Kafka's
    /// acknowledgement (a gRPC call then fails with UNAVAILABLE; push requests are sent again).
    public var sendTimeout: Duration
    /// Thumbnails of layout images (`ISLET_THUMBNAIL_HOSTS`, `_MAX_BYTES`, `_TIMEOUT_MS`).
    public var thumbnails = ThumbnailService.Settings()
    /// `ISLET_REGISTRY_GRPC` (`host:port` of token-registry's gRPC API) and `ISLET_REGISTRY_GRPC_KEY`
    /// (a backend key of its `ISLET_GRPC_KEYS` with `write`): where an activity the freshness
    /// monitor ended has its token invalidated. Unset: the token stays active until the app ends it.
    public var registry: (host: String, port: Int, key: String)?
    /// `ISLET_CONTENT_CHANGELOG_INTERVAL_MS` (default 5000, at least 100): how often the memories
    /// that changed are written to `islet.content-memory.v1` (``ChangelogWriter``). Shorter: less
    /// to read again after a crash, more records.
    public var changelogInterval: Duration = .seconds(5)
    /// `ISLET_CONTENT_PEERS` (`host:port,…` of the other instances' HTTP APIs; a name that resolves
    /// to several addresses counts as each, this instance's own address is left out): where a
    /// backend's question about an activity this instance does not own is asked
    /// (``PeerForwarding``). None: such a question is answered 421 `notOwner`.
    public var peers: [PeerForwarding.Peer] = []

    public init(
        templatesDirectory: String, keyring: LinkKeyring, policy: ContentPolicy = ContentPolicy(), freshness: FreshnessPolicy = FreshnessPolicy(),
        grpcHost: String = "127.0.0.1", grpcPort: Int = 9_083, sendTimeout: Duration = .seconds(5), backendKeys: BackendKeys = try! BackendKeys([:])
    ) {
        self.backendKeys = backendKeys
        self.templatesDirectory = templatesDirectory
        self.keyring = keyring
        self.policy = policy
        self.freshness = freshness
        self.grpcHost = grpcHost
        self.grpcPort = grpcPort
        self.sendTimeout = sendTimeout
    }

    public init(from config: IsletConfig) throws {
        let linkKeys = try config.properties("islet.link.keys", as: LinkKeyring.keys(fromSecrets:))
        let signingID = try config.string("islet.link.signing.key", default: linkKeys.count == 1 ? linkKeys[0].id : "")
        guard let signing = linkKeys.first(where: { $0.id == signingID }) else {
            throw ConfigurationError(key: "islet.link.signing.key", problem: "must name one of the keys of ISLET_LINK_KEYS")
        }
        var policy = ContentPolicy()
        policy.maximumAlerts = try config.int("islet.alerts.per.hour", default: 3, range: 0...100)
        switch config.optionalString("islet.dismissal") {
        case nil: break
        case "immediate": policy.dismissal = .immediate
        case "system": policy.dismissal = .system
        case let text?:
            guard let seconds = Int(text), (0...14_400).contains(seconds) else {
                throw ConfigurationError(key: "islet.dismissal", problem: "must be immediate, system or seconds up to 14400, got \(text)")
            }
            policy.dismissal = .after(.seconds(seconds))
        }
        var freshness = FreshnessPolicy()
        freshness.checkInterval = .seconds(try config.int("islet.freshness.interval.seconds", default: 5, range: 1...3_600))
        freshness.maximumResends = try config.int("islet.freshness.resends", default: 3, range: 0...100)
        freshness.resendSpacing = .seconds(try config.int("islet.freshness.resend.spacing.seconds", default: 60, range: 1...3_600))
        freshness.severeAfter = .seconds(try config.int("islet.freshness.severe.seconds", default: 600, range: 60...28_800))
        freshness.lifetime = .seconds(try config.int("islet.activity.lifetime.seconds", default: 28_200, range: 60...28_800))
        self.init(
            templatesDirectory: try config.string("islet.templates.dir", default: "Services/ContentService/Templates"),
            keyring: LinkKeyring(signing: signing, accepted: linkKeys), policy: policy, freshness: freshness,
            grpcHost: try config.string("islet.grpc.host", default: "127.0.0.1"),
            grpcPort: try config.int("islet.grpc.port", default: 9_083, range: 0...65_535),
            sendTimeout: try config.milliseconds("islet.kafka.send.timeout.ms", default: .seconds(5)),
            backendKeys: try config.properties("islet.grpc.keys") { try BackendKeys($0) })
        maxBodyBytes = try config.int("islet.http.max.body.bytes", default: 65_536, range: 1_024...1_048_576)
        changelogInterval = try config.milliseconds("islet.content.changelog.interval.ms", default: .seconds(5))
        guard changelogInterval >= .milliseconds(100) else {
            throw ConfigurationError(key: "islet.content.changelog.interval.ms", problem: "must be at least 100")
        }
        do {
            peers = try PeerForwarding.Peer.list(config.optionalString("islet.content.peers") ?? "")
        } catch {
            throw ConfigurationError(key: "islet.content.peers", problem: "must be host:port of the other instances' HTTP APIs, comma-separated: \(error)")
        }
        thumbnails.allowedHosts = (config.optionalString("islet.thumbnail.hosts") ?? "").split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        thumbnails.maximumBytes = try config.int("islet.thumbnail.max.bytes", default: 2_000_000, range: 1_000...50_000_000)
        thumbnails.timeout = try config.milliseconds("islet.thumbnail.timeout.ms", default: .milliseconds(1_500))
        if let target = config.optionalString("islet.registry.grpc") {
            let parts = target.split(separator: ":")
            guard parts.count == 2, !parts[0].isEmpty, let port = Int(parts[1]), (1...65_535).contains(port) else {
                throw ConfigurationError(key: "islet.registry.grpc", problem: "must be host:port, got \(target)")
            }
            guard let key = config.optionalString("islet.registry.grpc.key", isSecret: true), key.utf8.count >= 32 else {
                throw ConfigurationError(key: "islet.registry.grpc.key", problem: "is required with ISLET_REGISTRY_GRPC: a backend key of token-registry's ISLET_GRPC_KEYS with write (at least 32 characters)")
            }
            registry = (String(parts[0]), port, key)
        }
    }
}

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
        let table = try Self.tokenTable(runtime: runtime, topic: topics.tokens)

        // The activities' memory, from the service's own output and the dispatcher's answers.
        let engine = ContentEngine(
            assembler: PayloadAssembler(templates: templates, keyring: settings.keyring, policy: settings.policy), tokens: table.tokens,
            freshness: settings.freshness)
        let sender = RequestSender(producer: producer, engine: engine, topic: topics.pushRequests, logger: logger)
        let (memoryLoader, changelog) = Self.memory(runtime: runtime, settings: settings, topics: topics, engine: engine, sender: sender, producer: producer)
        let consumer = try KafkaConsumer(configuration: runtime.settings.consumerConfiguration(topics: [topics.activityEvents]), logger: logger)
        let thumbnails = settings.thumbnails.allowedHosts.isEmpty ? nil : ThumbnailService(settings: settings.thumbnails, logger: logger)
        let loop = ContentServiceLoop(
            consumer: consumer,
            deadLetters: DeadLetterWriter(producer: producer, consumer: consumer, service: service, logger: logger, topic: topics.deadLetters),
            engine: engine, sender: sender, thumbnails: thumbnails, changelog: changelog, memory: memoryLoader, logger: logger)
        let monitor = Self.monitor(runtime: runtime, settings: settings, topics: topics, engine: engine, sender: sender)
        let ready: @Sendable () -> Bool = { Self.isReady(health.report().checks) }
        let intake = EventIntake(engine: engine, producer: producer, topic: topics.activityEvents, isReady: ready)
        // The backends' gRPC API.
        if settings.backendKeys.isEmpty { logger.warning("ISLET_GRPC_KEYS names no backend: the gRPC and HTTP APIs refuse every call") }
        let grpc = GRPCServerService(
            host: settings.grpcHost, port: settings.grpcPort, services: [ActivityGRPCService(intake: intake)],
            interceptors: [BackendAuthInterceptor(keys: settings.backendKeys, permissions: BackendAuthInterceptor.activityServiceMethods)],
            onListening: { ListenerReport.bound("grpc", port: $0) })
        // The backends' HTTP API, beside /health and /metrics.
        let router = runtime.makeRouter()
        ActivityHTTPAPI(
            intake: intake, keys: settings.backendKeys, maxBodyBytes: settings.maxBodyBytes,
            lookup: Self.lookup(runtime: runtime, topics: topics, memory: memoryLoader, sender: sender), peers: Self.peers(runtime: runtime, settings: settings)
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
            runtime.listener(grpc, name: "grpc", host: settings.grpcHost, port: settings.grpcPort, variables: ["ISLET_GRPC_HOST", "ISLET_GRPC_PORT"]),
            runtime.httpServer(router: router.buildResponder()),
            runtime.operatorServer(router: operatorRouter.buildResponder()),
        ]
    }

    /// Whether the token table and the memory are read: events are taken only then.
    static func isReady(_ checks: [String: HealthRegistry.Status]) -> Bool {
        checks[tableCheck] == .ready && checks[memoryCheck] == .ready
    }

    /// The token table (which app, version and environment an activity has): the whole topic,
    /// compact. content-service looks up tokens of activities whose partitions it does not own
    /// (a remote start's push-to-start token, an event checked through the gRPC API).
    private static func tokenTable(runtime: ServiceRuntime, topic: String) throws
        -> (tokens: PartitionTokens, replica: KafkaConsumer, loader: TokenTableLoader)
    {
        let (logger, service, health) = (runtime.logger, runtime.settings.serviceName, runtime.health)
        let tokens = PartitionTokens.whole(fingerprintsOnly: true)
        health.register(Self.tableCheck)
        let replica = try KafkaConsumer(
            configuration: TokenTableLoader.replicaConfiguration(
                bootstrapServers: runtime.settings.kafkaBootstrap, topic: topic, clientID: service, settings: runtime.settings.consumerProperties),
            logger: logger)
        let loader = TokenTableLoader(consumer: replica, table: tokens, service: service, logger: logger) { health.setReady(Self.tableCheck) }
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
            since: engine.clock.date.addingTimeInterval(-(settings.freshness.retention / .seconds(1))), ownWrites: sender.writer, logger: logger,
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
            bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushRequests, settings: runtime.settings.consumerProperties, logger: logger)
        return FreshnessMonitor(engine: engine, sender: sender, logger: logger, invalidator: invalidator, payloads: payloads)
    }

    /// Questions about an activity are answered where its memory is (the owner of its partition),
    /// its latest outcomes read again from where the memory saw them.
    private static func lookup(runtime: ServiceRuntime, topics: Topics, memory: ContentMemoryLoader, sender: RequestSender) -> ActivityLookup {
        let outcomes = OutcomeReader(
            bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushOutcomes, settings: runtime.settings.consumerProperties,
            logger: runtime.logger)
        return ActivityLookup(
            partition: { activityId in memory.activityPartitionCount.map { KafkaPartitioner.partition(ofKey: activityId, partitions: $0) } },
            owned: { sender.ownedPartitions }, readOutcomes: { positions throws(ActivityLookup.Unavailable) in try await outcomes.read(positions) })
    }

    /// The other instances, when there are: a call about an activity another owns is asked there.
    /// A forwarded event waits for Kafka's acknowledgement at the owner: longer than that.
    private static func peers(runtime: ServiceRuntime, settings: ContentSettings) -> PeerForwarding? {
        settings.peers.isEmpty
            ? nil
            : PeerForwarding(peers: settings.peers, ownPort: runtime.settings.httpPort, timeout: settings.sendTimeout + .seconds(1), logger: runtime.logger)
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
