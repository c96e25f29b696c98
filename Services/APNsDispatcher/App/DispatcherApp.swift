import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle

/// Publishes outcomes to `islet.push-outcomes.v1`, broadcast channels' records to
/// `islet.broadcast-channels.v1`.
public struct KafkaOutcomeSink: OutcomeSink {
    public let producer: KafkaProducer
    public let topic: String
    public let channelsTopic: String

    public init(producer: KafkaProducer, topic: String = IsletTopics.pushOutcomes.name, channelsTopic: String = IsletTopics.broadcastChannels.name) {
        self.producer = producer
        self.topic = topic
        self.channelsTopic = channelsTopic
    }

    public func publish(_ outcome: PushOutcome) async throws {
        try await producer.send(outcome, to: topic)
    }

    /// Hands the outcome to the producer without awaiting its acknowledgement (the callback path,
    /// `produce(onDelivery:)`); waits only while librdkafka's queue is full.
    public func submit(_ outcome: PushOutcome, persisted: @escaping @Sendable ((any Error)?) -> Void) async {
        let value: [UInt8]
        do {
            value = try IsletJSON.encode(outcome)
        } catch {
            return persisted(error)
        }
        let key = outcome.key.map { Array($0.utf8) }
        while true {
            do {
                try producer.produce(topic: topic, key: key, value: value) { result in
                    switch result {
                    case .success: persisted(nil)
                    case .failure(let error): persisted(error)
                    }
                }
                return
            } catch where error.isQueueFull {
                // Free again once deliveries are served (or at shutdown: the next try then fails).
                await producer.waitForCapacity()
            } catch {
                return persisted(error)
            }
        }
    }

    public func record(_ channel: BroadcastChannelRecord) async throws {
        try await producer.send(channel, to: channelsTopic)
    }
}

/// apns-dispatcher, assembled: what `main` runs.
public struct DispatcherApp: Sendable {
    /// The topics it reads and writes (tests use their own).
    public struct Topics: Sendable {
        public var tokens = IsletTopics.tokens.name
        public var pushRequests = IsletTopics.pushRequests.name
        public var pushOutcomes = IsletTopics.pushOutcomes.name
        public var budgets = IsletTopics.dispatchBudgets.name
        public var channels = IsletTopics.broadcastChannels.name
        public var deadLetters = IsletTopics.deadLetters.name
        public init() {}
    }

    /// Not ready while the token partitions of newly assigned partitions are being read.
    public static let tableCheck = "tokens-table"

    public let engine: DispatchEngine
    public let client: APNsClient
    /// The tokens of the partitions this instance owns.
    public let tokens: PartitionTokens
    /// In start order; stopped in reverse (HTTP, the dispatcher's loop, the budgets' changelog, the token partitions, the producer).
    public let services: [any Service]

    public init(runtime: ServiceRuntime, settings: DispatcherSettings, topics: Topics = Topics(), clock: any WallClock = SystemWallClock()) throws {
        let logger = runtime.logger
        let service = runtime.settings.serviceName
        for app in settings.uncovered.sorted(by: { ($0.bundleId, $0.environment.rawValue) < ($1.bundleId, $1.environment.rawValue) }) {
            logger.notice(
                "no APNs signing key covers this app in this environment: its requests there are rejected",
                metadata: ["app.bundle_id": "\(app.bundleId)", "app.environment": "\(app.environment.rawValue)"])
        }
        let producer = try KafkaProducer(configuration: runtime.settings.producerConfiguration(), logger: logger)
        let health = runtime.health
        // The tokens of the partitions the group gives this instance, read when they are assigned,
        // with the same partitions of the budgets' changelog.
        let tokens = PartitionTokens()
        let consumer = try KafkaConsumer(configuration: runtime.settings.consumerConfiguration(topics: [topics.pushRequests]), logger: logger)
        let tickets = TicketBook(consumer: consumer)
        let client = try APNsClient(configuration: settings.client, keys: settings.keys, logger: logger)
        let engine = DispatchEngine(
            sender: client, tokens: tokens, outcomes: KafkaOutcomeSink(producer: producer, topic: topics.pushOutcomes, channelsTopic: topics.channels), policy: settings.policy,
            teams: settings.teams, clock: clock, logger: logger, uncovered: settings.uncovered, signers: settings.signers, onDone: { tickets.done($0) }, onAbandon: { tickets.abandon($0) })
        let budgets = BudgetChangelog(engine: engine, producer: producer, topic: topics.budgets, interval: settings.budgetsInterval, logger: logger)
        let (bootstrap, properties) = (runtime.settings.kafkaBootstrap, runtime.settings.consumerProperties)
        let (budgetsTopic, channelsTopic) = (topics.budgets, topics.channels)
        let loader = PartitionTokenLoader(
            tokens: tokens, service: service, logger: logger,
            otherRecords: { message in
                switch message.topic {
                case budgetsTopic: BudgetChangelog.restore(message, into: engine, logger: logger)
                case channelsTopic: Self.restoreChannel(message, into: engine, logger: logger)
                default: return false
                }
                return true
            }
        ) { partitions in
            try KafkaConsumer(
                configuration: PartitionTokenLoader.replicaConfiguration(
                    bootstrapServers: bootstrap, topic: topics.tokens, alsoTopics: [budgetsTopic, channelsTopic], partitions: partitions, clientID: service,
                    settings: properties),
                logger: logger)
        }
        health.register(Self.tableCheck) {
            loader.isRestoring ? .notReady("reading the token partitions just assigned (or read again by a new replica)") : .ready
        }

        let dispatcher = DispatcherService(
            consumer: consumer,
            deadLetters: DeadLetterWriter(producer: producer, consumer: consumer, service: service, logger: logger, topic: topics.deadLetters),
            engine: engine, tickets: tickets, tokenLoader: loader, budgets: budgets,
            recentOutcomes: RecentOutcomes(
                bootstrapServers: runtime.settings.kafkaBootstrap, topic: topics.pushOutcomes, window: settings.dedupeWindow,
                settings: runtime.settings.consumerProperties, logger: logger),
            logger: logger)

        // Readiness follows the Kafka clients too: not ready while one cannot reach the cluster or
        // is being recreated; not live once recreation keeps failing.
        health.register("kafka.producer") { producer.health }
        health.register("kafka.tokens") { loader.health }
        health.register("kafka.requests") { consumer.health }
        health.register("dispatch-budgets.changelog") { budgets.failure.map { .notReady("the budgets' changelog is behind: \($0)") } ?? .ready }

        self.engine = engine
        self.client = client
        self.tokens = tokens
        var services: [any Service] = [producer, loader, budgets, dispatcher, runtime.httpServer(router: runtime.makeRouter().buildResponder())]
        if settings.channelSweepInterval > .zero {
            services.append(
                ChannelSweeper(
                    listing: client, records: ChannelSweeper.readRecords(topic: topics.channels, bootstrapServers: bootstrap, logger: logger),
                    teams: settings.teams, environments: settings.channelSweepEnvironments, deletes: settings.channelSweepDeletes,
                    sharedHost: settings.client.channelsProduction == settings.client.channelsSandbox, interval: settings.channelSweepInterval, confirmAfter: min(.seconds(600), settings.channelSweepInterval),
                    logger: logger))
        }
        self.services = services
    }

    /// A record of `islet.broadcast-channels.v1` read when its partition was assigned: the
    /// activity's channel, reused rather than made again. One that does not decode is left out.
    static func restoreChannel(_ message: KafkaMessage, into engine: DispatchEngine, logger: Logger) {
        guard let value = message.value else { return }
        do {
            engine.channelRecorded(try IsletJSON.decode(BroadcastChannelRecord.self, from: value))
        } catch {
            logger.error("a broadcast channel record does not decode: left out", metadata: ["kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }
}
