import IsletKafka
import IsletRuntime
import Logging
import Testing

@Suite("Configuration from the environment")
struct ConfigTests {
    @Test("dotted keys map to environment variables")
    func variableNames() {
        #expect(IsletConfig.variableName(for: "islet.kafka.bootstrap") == "ISLET_KAFKA_BOOTSTRAP")
        #expect(IsletConfig.variableName(for: "islet.shutdown.timeout.ms") == "ISLET_SHUTDOWN_TIMEOUT_MS")
    }

    @Test("settings read with their defaults")
    func defaults() throws {
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": "kafka:9092"]), serviceName: "token-registry", defaultHTTPPort: 8081)
        #expect(settings.kafkaBootstrap == "kafka:9092")
        #expect(settings.httpHost == "0.0.0.0")
        #expect(settings.httpPort == 8081)
        #expect(settings.logLevel == .info)
        #expect(settings.shutdownTimeout == .seconds(10))
        #expect(settings.producerProperties.isEmpty)
        let consumer = settings.consumerConfiguration(topics: ["islet.tokens.v1"])
        #expect(consumer.groupID == "token-registry")
        #expect(consumer.bootstrapServers == "kafka:9092")
    }

    @Test("given settings override the defaults; librdkafka properties pass through by their own names")
    func overrides() throws {
        let settings = try ServiceSettings(
            from: .variables([
                "ISLET_KAFKA_BOOTSTRAP": "a:1,b:2", "ISLET_HTTP_PORT": "9000", "ISLET_LOG_LEVEL": "DEBUG",
                "ISLET_SHUTDOWN_TIMEOUT_MS": "2500",
                "ISLET_KAFKA_CONSUMER_PROPERTIES": "fetch.wait.max.ms=5, session.timeout.ms = 6000",
                "ISLET_KAFKA_PRODUCER_PROPERTIES": "linger.ms=1",
            ]), serviceName: "s", defaultHTTPPort: 1)
        #expect(settings.httpPort == 9000)
        #expect(settings.logLevel == .debug)
        #expect(settings.shutdownTimeout == .milliseconds(2500))
        #expect(settings.consumerProperties == ["fetch.wait.max.ms": "5", "session.timeout.ms": "6000"])
        #expect(settings.producerConfiguration().settings == ["linger.ms": "1"])
    }

    @Test("librdkafka's security properties come from ISLET_KAFKA_<NAME> and reach every client: producers, consumers, replicas; explicit properties win")
    func securityProperties() throws {
        let settings = try ServiceSettings(
            from: .variables([
                "ISLET_KAFKA_BOOTSTRAP": "kafka:9092", "ISLET_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "ISLET_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-512",
                "ISLET_KAFKA_SASL_USERNAME": "token-registry", "ISLET_KAFKA_SASL_PASSWORD": "s3cret", "ISLET_KAFKA_SSL_CA_LOCATION": "/run/ca.pem",
                "ISLET_KAFKA_CONSUMER_PROPERTIES": "sasl.username=reader",
            ]), serviceName: "s", defaultHTTPPort: 1)
        let security = [
            "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "token-registry", "sasl.password": "s3cret",
            "ssl.ca.location": "/run/ca.pem",
        ]
        #expect(settings.producerConfiguration().settings == security)
        #expect(settings.consumerConfiguration(topics: ["t"]).settings == security.merging(["sasl.username": "reader"]) { $1 })
        #expect(KafkaSecurity.properties(from: ["ISLET_KAFKA_SASL_PASSWORD": "p", "ISLET_KAFKA_SSL_KEY_LOCATION": "", "OTHER": "x"]) == ["sasl.password": "p"])
    }

    @Test("a missing or invalid value is an error that names the variable", arguments: [
        ([:], "ISLET_KAFKA_BOOTSTRAP"),
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_HTTP_PORT": "eighty"], "ISLET_HTTP_PORT"),
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_HTTP_PORT": "70000"], "ISLET_HTTP_PORT"),
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_LOG_LEVEL": "loud"], "ISLET_LOG_LEVEL"),
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_KAFKA_CONSUMER_PROPERTIES": "fetch.wait.max.ms"], "ISLET_KAFKA_CONSUMER_PROPERTIES"),
        // A name given twice (one of them would be dropped without a word).
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_KAFKA_CONSUMER_PROPERTIES": "fetch.wait.max.ms=5,fetch.wait.max.ms=50"], "ISLET_KAFKA_CONSUMER_PROPERTIES"),
        (["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_SHUTDOWN_TIMEOUT_MS": "-1"], "ISLET_SHUTDOWN_TIMEOUT_MS"),
    ] as [([String: String], String)])
    func errorsNameTheVariable(variables: [String: String], variable: String) throws {
        let error = try #require(throws: ConfigurationError.self) {
            try ServiceSettings(from: .variables(variables), serviceName: "s", defaultHTTPPort: 1)
        }
        #expect(error.variable == variable)
        #expect(error.description.contains(variable))
    }

    @Test("booleans accept the usual spellings and nothing else")
    func booleans() throws {
        for yes in ["1", "true", "YES", "on"] {
            #expect(try IsletConfig.variables(["X_FLAG": yes]).bool("x.flag", default: false))
        }
        for no in ["0", "false", "No", "off"] {
            #expect(try !IsletConfig.variables(["X_FLAG": no]).bool("x.flag", default: true))
        }
        #expect(throws: ConfigurationError.self) { try IsletConfig.variables(["X_FLAG": "maybe"]).bool("x.flag", default: true) }
        #expect(try IsletConfig.variables([:]).bool("x.flag", default: true))
    }
}
