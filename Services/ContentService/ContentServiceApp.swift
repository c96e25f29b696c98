import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
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

    public init(templatesDirectory: String, keyring: LinkKeyring, policy: ContentPolicy = ContentPolicy()) {
        self.templatesDirectory = templatesDirectory
        self.keyring = keyring
        self.policy = policy
    }

    public init(from config: IsletConfig) throws {
        let keys = try config.properties("islet.link.keys").sorted { $0.key < $1.key }
        guard !keys.isEmpty else { throw ConfigurationError(key: "islet.link.keys", problem: "must name at least one key: kid=secret") }
        var linkKeys: [LinkKey] = []
        for (kid, secret) in keys {
            do {
                linkKeys.append(try LinkKey(id: kid, secret: Array(secret.utf8)))
            } catch {
                throw ConfigurationError(key: "islet.link.keys", problem: error.description)
            }
        }
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
        self.init(
            templatesDirectory: try config.string("islet.templates.dir", default: "Services/ContentService/Templates"),
            keyring: LinkKeyring(signing: signing, accepted: linkKeys), policy: policy)
    }
}

/// content-service, assembled: what `main` runs.
public struct ContentServiceApp: Sendable {
    public struct Topics: Sendable {
        public var tokens = IsletTopics.tokens.name
        public var activityEvents = IsletTopics.activityEvents.name
        public var pushRequests = IsletTopics.pushRequests.name
        public var deadLetters = IsletTopics.deadLetters.name
        public init() {}
    }

    public static let tableCheck = "tokens-table"

    public let engine: ContentEngine
    public let services: [any Service]

    public init(runtime: ServiceRuntime, settings: ContentSettings, topics: Topics = Topics()) throws {
        let logger = runtime.logger
        let service = runtime.settings.serviceName
        let templates = try TemplateLoader.load(directory: settings.templatesDirectory)
        logger.info("templates loaded", metadata: ["templates": "\(templates.keys.sorted())"])
        let producer = try KafkaProducer(configuration: runtime.settings.producerConfiguration(), logger: logger)
        let tokens = TokenTable()
        let health = runtime.health
        health.register(Self.tableCheck)
        let replica = try KafkaConsumer(
            configuration: .replica(
                bootstrapServers: runtime.settings.kafkaBootstrap, topics: [topics.tokens], clientID: service, settings: runtime.settings.consumerProperties),
            logger: logger)
        let loader = TokenTableLoader(consumer: replica, table: tokens, service: service, logger: logger) { health.setReady(Self.tableCheck) }
        let consumer = try KafkaConsumer(configuration: runtime.settings.consumerConfiguration(topics: [topics.activityEvents]), logger: logger)
        let engine = ContentEngine(assembler: PayloadAssembler(templates: templates, keyring: settings.keyring, policy: settings.policy), tokens: tokens)
        let loop = ContentServiceLoop(
            consumer: consumer, producer: producer,
            deadLetters: DeadLetterWriter(producer: producer, consumer: consumer, service: service, logger: logger, topic: topics.deadLetters),
            engine: engine, requestsTopic: topics.pushRequests, logger: logger)
        self.engine = engine
        self.services = [
            producer, loader, ReadinessGate(health: health, check: Self.tableCheck, then: loop), runtime.httpServer(router: runtime.makeRouter().buildResponder()),
        ]
    }
}
