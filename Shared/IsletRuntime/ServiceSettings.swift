import IsletKafka
import Logging

/// What every Islet service reads the same way. docs/configuration.md lists the variables.
public struct ServiceSettings: Sendable {
    /// The service's name: the consumer group, the `service` in dead letters and logs.
    public var serviceName: String
    /// `ISLET_KAFKA_BOOTSTRAP` (required): `host:port[,host:port…]`.
    public var kafkaBootstrap: String
    /// `ISLET_KAFKA_PRODUCER_PROPERTIES`: extra librdkafka producer properties, `name=value,…`,
    /// after the security properties (``KafkaSecurity``: `ISLET_KAFKA_SECURITY_PROTOCOL`,
    /// `ISLET_KAFKA_SASL_USERNAME` …), which every client gets.
    public var producerProperties: [String: String]
    /// `ISLET_KAFKA_CONSUMER_PROPERTIES`: extra librdkafka consumer properties, `name=value,…`,
    /// after the security properties.
    public var consumerProperties: [String: String]
    /// `ISLET_HTTP_HOST` (default `0.0.0.0`): where /health and /metrics (and the service's API) listen.
    public var httpHost: String
    /// `ISLET_HTTP_PORT` (default: the service's own).
    public var httpPort: Int
    /// `ISLET_OPERATOR_HOST` (default `127.0.0.1`) and `ISLET_OPERATOR_PORT` (default the HTTP
    /// port + 100, or 0 when that is 0): the operator listener. token-registry and
    /// analytics-ingest, whose HTTP port faces phones, serve /health and /metrics there (the
    /// app-facing port serves /health and the app's API only); content-service serves its list of
    /// stale activities there (it names activities), and /health and /metrics on its HTTP port.
    public var operatorHost: String
    public var operatorPort: Int
    /// `ISLET_HTTP_REQUEST_TIMEOUT_MS` (default 15000; 0: none): a client must send a whole request
    /// within this time of opening its connection or of the previous response, or the connection
    /// is closed. `ISLET_HTTP_MAX_CONNECTIONS_PER_ADDRESS` (default 256; 0: no cap): connections
    /// one remote address may hold at once.
    public var httpLimits: HTTPConnectionLimits
    /// `ISLET_LOG_LEVEL` (default `info`): trace, debug, info, notice, warning, error, critical.
    public var logLevel: Logger.Level
    /// `ISLET_SHUTDOWN_TIMEOUT_MS` (default 10000): graceful shutdown escalates to cancellation after this.
    public var shutdownTimeout: Duration
    /// `ISLET_LIVENESS_EXIT_AFTER_MS` (default 30000; 0: never): once `/health/live` has failed
    /// this long (a Kafka client whose recreation keeps failing), the service shuts down and exits
    /// with status 1, so that a restart policy (compose's `restart: unless-stopped`) replaces it.
    public var livenessExitAfter: Duration

    public init(from config: IsletConfig, serviceName: String, defaultHTTPPort: Int) throws(ConfigurationError) {
        self.serviceName = serviceName
        self.kafkaBootstrap = try config.string("islet.kafka.bootstrap")
        var security: [String: String] = [:]
        for name in KafkaSecurity.propertyNames {
            let secret = name.hasSuffix("password") || name.hasSuffix("secret") || name.hasSuffix(".pem")
            if let value = config.optionalString("islet.kafka." + name, isSecret: secret) { security[name] = value }
        }
        self.producerProperties = security.merging(try config.properties("islet.kafka.producer.properties")) { $1 }
        self.consumerProperties = security.merging(try config.properties("islet.kafka.consumer.properties")) { $1 }
        self.httpHost = try config.string("islet.http.host", default: "0.0.0.0")
        self.httpPort = try config.int("islet.http.port", default: defaultHTTPPort, range: 0...65_535)
        self.operatorHost = try config.string("islet.operator.host", default: "127.0.0.1")
        self.operatorPort = try config.int("islet.operator.port", default: httpPort == 0 ? 0 : min(httpPort + 100, 65_535), range: 0...65_535)
        if operatorPort != 0 && operatorPort == httpPort {
            throw ConfigurationError(key: "islet.operator.port", problem: "must differ from ISLET_HTTP_PORT (\(httpPort))")
        }
        self.httpLimits = HTTPConnectionLimits(
            requestTimeout: try config.milliseconds("islet.http.request.timeout.ms", default: .seconds(15)),
            maxConnectionsPerAddress: try config.int("islet.http.max.connections.per.address", default: 256, range: 0...1_000_000))
        self.logLevel = try config.choice("islet.log.level", default: .info, allowed: Logger.Level.allCases)
        self.shutdownTimeout = try config.milliseconds("islet.shutdown.timeout.ms", default: .seconds(10))
        self.livenessExitAfter = try config.milliseconds("islet.liveness.exit.after.ms", default: .seconds(30))
    }

    /// The producer configuration: Islet's defaults plus ``producerProperties``.
    public func producerConfiguration() -> KafkaProducerConfiguration {
        KafkaProducerConfiguration(bootstrapServers: kafkaBootstrap, clientID: serviceName, settings: producerProperties)
    }

    /// A consumer in the service's group (or `group`), with Islet's defaults plus ``consumerProperties``.
    public func consumerConfiguration(topics: [String], group: String? = nil) -> KafkaConsumerConfiguration {
        KafkaConsumerConfiguration(
            bootstrapServers: kafkaBootstrap, groupID: group ?? serviceName, topics: topics, clientID: serviceName,
            settings: consumerProperties)
    }
}
