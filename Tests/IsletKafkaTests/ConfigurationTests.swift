import IsletKafka
import Logging
import Testing

@Suite("Kafka configuration")
struct ConfigurationTests {
    let logger = quietLogger

    @Test("the producer is idempotent with acks=all and Islet's defaults, and the user's settings win over defaults")
    func producerDefaults() throws {
        var configuration = KafkaProducerConfiguration(bootstrapServers: "127.0.0.1:1", settings: ["linger.ms": "20"])
        configuration.clientID = "token-registry"
        // Creating a producer validates every property with librdkafka itself.
        _ = try KafkaProducer(configuration: configuration, logger: logger)
        #expect(KafkaProducerConfiguration.defaultSettings["linger.ms"] == "5")
    }

    @Test("turning off the delivery guarantees is refused, naming the property", arguments: [
        ["enable.idempotence": "false"], ["acks": "1"], ["acks": "0"],
    ])
    func guaranteesAreEnforced(settings: [String: String]) throws {
        let error = try #require(throws: KafkaError.self) {
            try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:1", settings: settings), logger: logger)
        }
        #expect(error.code == .configuration)
        #expect(error.message.contains(settings.keys.first!))
    }

    @Test("restating an enforced value is fine", arguments: [["acks": "all"], ["acks": "-1"], ["enable.idempotence": "true"]])
    func restatingIsFine(settings: [String: String]) throws {
        _ = try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:1", settings: settings), logger: logger)
    }

    @Test("an unknown or invalid librdkafka property is a configuration error naming it")
    func unknownProperty() throws {
        let unknown = try #require(throws: KafkaError.self) {
            try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:1", settings: ["no.such.property": "1"]), logger: logger)
        }
        #expect(unknown.code == .configuration)
        #expect(unknown.message.contains("no.such.property"))

        let invalid = try #require(throws: KafkaError.self) {
            try KafkaConsumer(
                configuration: .init(bootstrapServers: "127.0.0.1:1", groupID: "g", topics: ["t"], settings: ["fetch.wait.max.ms": "soon"]),
                logger: logger)
        }
        #expect(invalid.message.contains("fetch.wait.max.ms"))
    }

    @Test("at-least-once cannot be switched off on a consumer", arguments: [
        ["enable.auto.offset.store": "true"], ["enable.auto.commit": "false"],
    ])
    func consumerGuarantees(settings: [String: String]) throws {
        let error = try #require(throws: KafkaError.self) {
            try KafkaConsumer(configuration: .init(bootstrapServers: "127.0.0.1:1", groupID: "g", topics: ["t"], settings: settings), logger: logger)
        }
        #expect(error.code == .configuration)
    }

    @Test("a replica takes no group, commits nothing and reports partition ends; librdkafka accepts it")
    func replicaConfiguration() throws {
        _ = try KafkaConsumer(configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: ["t"]), logger: logger)
        let withGroup = try #require(throws: KafkaError.self) {
            try KafkaConsumer(configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: ["t"], settings: ["group.id": "g"]), logger: logger)
        }
        #expect(withGroup.code == .configuration)
        let noEnds = try #require(throws: KafkaError.self) {
            try KafkaConsumer(
                configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: ["t"], settings: ["enable.partition.eof": "false"]), logger: logger)
        }
        #expect(noEnds.message.contains("enable.partition.eof"))
    }

    @Test("a replica fetches with a 100 ms wait unless told otherwise; the user's setting wins")
    func replicaFetchWait() {
        #expect(KafkaConsumerConfiguration.replica(bootstrapServers: "b", topics: ["t"]).settings["fetch.wait.max.ms"] == "100")
        #expect(KafkaConsumerConfiguration.replica(bootstrapServers: "b", topics: ["t"], fetchWait: .milliseconds(10)).settings["fetch.wait.max.ms"] == "10")
        let user = KafkaConsumerConfiguration.replica(bootstrapServers: "b", topics: ["t"], fetchWait: .milliseconds(10), settings: ["fetch.wait.max.ms": "5"])
        #expect(user.settings["fetch.wait.max.ms"] == "5")
        // A group member keeps the hot path's default (10 ms, applied when the client is made).
        #expect(KafkaConsumerConfiguration(bootstrapServers: "b", groupID: "g", topics: ["t"]).settings["fetch.wait.max.ms"] == nil)
        #expect(KafkaConsumerConfiguration.defaultSettings["fetch.wait.max.ms"] == "10")
    }

    @Test("a consumer needs topics, and a buffer at least as large as a batch")
    func consumerShape() throws {
        #expect(throws: KafkaError.self) {
            try KafkaConsumer(configuration: .init(bootstrapServers: "127.0.0.1:1", groupID: "g", topics: []), logger: logger)
        }
        #expect(throws: KafkaError.self) {
            try KafkaConsumer(
                configuration: .init(bootstrapServers: "127.0.0.1:1", groupID: "g", topics: ["t"], batchSize: 100, bufferCapacity: 10),
                logger: logger)
        }
    }

    @Test("the consumer's defaults keep a hop's latency low")
    func consumerDefaults() {
        #expect(KafkaConsumerConfiguration.defaultSettings["fetch.wait.max.ms"] == "10")
        #expect(KafkaConsumerConfiguration().offsetReset == .earliest)
    }
}

extension KafkaConsumerConfiguration {
    init() { self.init(bootstrapServers: "127.0.0.1:1", groupID: "g", topics: ["t"]) }
}
