import Foundation
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import ServiceLifecycle
import Testing
@testable import TokenRegistry
import HTTPTypes

private let logger = testLogger("islet.test.registry-integration")

/// One token-registry instance, run in process against the broker, on its own topics.
final class RunningRegistry: Sendable {
    let app: TokenRegistryApp
    let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(topics: TokenRegistryApp.Topics, group groupID: String, extraSettings: [String: String] = [:]) async throws {
        var variables = ["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]
        variables.merge(extraSettings) { $1 }
        let settings = try ServiceSettings(from: .variables(variables), serviceName: groupID, defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: logger)
        var registrySettings = RegistrySettings(verificationKeys: [.hs256(kid: "k", secret: Array(String(repeating: "s", count: 32).utf8))])
        registrySettings.grpcHost = "127.0.0.1"
        registrySettings.grpcPort = 0
        app = try await TokenRegistryApp(runtime: runtime, settings: registrySettings, topics: topics)
        group = runtime.makeServiceGroup(app.services)
        let group = self.group
        task = Task { try await group.run() }
    }

    /// Waits until the table is rebuilt (at most 30 s).
    func ready() async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !app.registry.isReady {
            guard ContinuousClock.now < deadline else { throw RegistryTestError("the registry did not become ready") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

struct RegistryTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

func uniqueTopics() async throws -> TokenRegistryApp.Topics {
    var topics = TokenRegistryApp.Topics()
    let suffix = UUID().uuidString.prefix(8).lowercased()
    topics.tokens = "test.tokens.\(suffix)"
    topics.pushOutcomes = "test.outcomes.\(suffix)"
    topics.deadLetters = "test.dlq.\(suffix)"
    let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
    _ = try await admin.createTopics([
        .init(name: topics.tokens, partitions: 3, configs: ["cleanup.policy": "compact"]),
        .init(name: topics.pushOutcomes, partitions: 3), .init(name: topics.deadLetters, partitions: 1),
    ])
    return topics
}

func request(_ token: String) -> RegisterActivityTokenRequest {
    RegisterActivityTokenRequest(
        token: token, attributesType: "DeliveryAttributes", app: AppTarget(bundleId: "com.example.food", environment: .production),
        frequentUpdatesEnabled: true, appVersion: "5.2.0")
}

@Suite("token-registry against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(3)))
struct RegistryIntegrationTests {
    @Test("a registration lands on the tokens topic under its key; a rotation supersedes it; a repeat writes nothing")
    func registrationAndRotation() async throws {
        let topics = try await uniqueTopics()
        let registry = try await RunningRegistry(topics: topics, group: "registry-\(UUID())")
        try await registry.ready()
        _ = try await registry.app.registry.registerActivityToken(user: "u1", activityId: "order-1", request(hexToken(1)))
        _ = try await registry.app.registry.registerActivityToken(user: "u1", activityId: "order-1", request(hexToken(1)))
        _ = try await registry.app.registry.registerActivityToken(user: "u1", activityId: "order-1", request(hexToken(2)))
        try await registry.stop()

        let records = try await TestBroker.read(TokenRecord.self, from: topics.tokens, count: 2)
        #expect(records.map(\.token) == [hexToken(1), hexToken(2)])
        #expect(records.allSatisfy { $0.key == "com.example.food/order-1" && $0.state == .active })
        #expect(records[1].registeredAt >= records[0].registeredAt)
    }

    @Test("a restarted registry rebuilds its table from the topic and answers exactly as before")
    func restartRebuilds() async throws {
        let topics = try await uniqueTopics()
        let first = try await RunningRegistry(topics: topics, group: "registry-\(UUID())")
        try await first.ready()
        let registry = first.app.registry
        for i in 0..<30 {
            _ = try await registry.registerActivityToken(user: "user-\(i % 4)", activityId: "activity-\(i)", request(hexToken(i)))
        }
        _ = try await registry.registerActivityToken(user: "user-1", activityId: "activity-1", request(hexToken(100)))
        _ = try await registry.invalidateActivity(user: "user-2", activityId: "activity-2", reason: .userDismissed)
        _ = try await registry.setFrequentUpdates(user: "user-3", activityId: "activity-3", enabled: false)
        let before = try (0..<30).map { i in try registry.activity(user: "user-\(i % 4)", activityId: "activity-\(i)") }
        try await first.stop()

        let second = try await RunningRegistry(topics: topics, group: "registry-\(UUID())")
        try await second.ready()
        let after = try (0..<30).map { i in try second.app.registry.activity(user: "user-\(i % 4)", activityId: "activity-\(i)") }
        #expect(after == before)
        // The rebuilt table enforces the same rules: the ended activity stays ended, owners stay owners.
        await #expect(throws: APIError.self) {
            try await second.app.registry.registerActivityToken(user: "user-2", activityId: "activity-2", request(hexToken(7)))
        }
        await #expect(throws: APIError.self) {
            try await second.app.registry.registerActivityToken(user: "user-0", activityId: "activity-1", request(hexToken(7)))
        }
        try await second.stop()
    }

    @Test("a 410 outcome invalidates the token; an older-timestamp 410 after a re-registration does not")
    func outcomesInvalidate() async throws {
        let topics = try await uniqueTopics()
        let running = try await RunningRegistry(topics: topics, group: "registry-\(UUID())")
        try await running.ready()
        let registry = running.app.registry
        let registered = try await registry.registerActivityToken(user: "u", activityId: "dead-1", request(hexToken(1)))
        _ = try await registry.registerActivityToken(user: "u", activityId: "alive-1", request(hexToken(2)))

        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        func outcome(_ activity: String, _ token: String, at timestamp: Date) -> PushOutcome {
            PushOutcome(
                requestId: UUID().uuidString, activityId: activity, result: .tokenInvalid,
                apns: .init(status: 410, reason: "Unregistered", apnsId: UUID().uuidString.lowercased(), timestamp: timestamp), priorityUsed: 10,
                attempts: 1, tokenFingerprint: TokenFingerprint.of(token: token), completedAt: timestamp)
        }
        // APNs says dead-1's token died after it was registered: invalidated.
        try await producer.send(outcome("dead-1", hexToken(1), at: registered.token.registeredAt.addingTimeInterval(1)), to: topics.pushOutcomes)
        // alive-1's token was registered after the 410's timestamp (the user reinstalled): it stays.
        try await producer.send(outcome("alive-1", hexToken(2), at: Date(timeIntervalSinceNow: -3_600)), to: topics.pushOutcomes)
        // Undecodable outcomes go to the dead-letter topic and do not stop the listener.
        try await producer.send(topic: topics.pushOutcomes, key: "alive-1", value: Array("{not json".utf8))
        producer.shutdown()
        try await producing.value

        let deadline = ContinuousClock.now + .seconds(30)
        while registry.table.record(forKey: "com.example.food/dead-1")?.state != .invalidated, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let dead = try #require(registry.table.record(forKey: "com.example.food/dead-1"))
        #expect(dead.state == .invalidated)
        #expect(dead.invalidation?.reason == .apnsUnregistered)
        #expect(dead.invalidation?.apnsTimestamp != nil)
        // Give the listener time to act on the second outcome too, then check it did nothing.
        try await Task.sleep(for: .seconds(1))
        #expect(registry.table.record(forKey: "com.example.food/alive-1")?.state == .active)
        try await running.stop()

        let records = try await TestBroker.read(TokenRecord.self, from: topics.tokens, count: 3)
        #expect(records.filter { $0.activityId == "dead-1" }.map(\.state) == [.active, .invalidated])
        #expect(records.filter { $0.activityId == "alive-1" }.map(\.state) == [.active])
    }

    @Test("with Kafka unreachable, a registration is answered 503 within the send timeout and changes nothing")
    func kafkaDown() async throws {
        var quiet = logger
        quiet.logLevel = .critical  // librdkafka reports every refused connection
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: "127.0.0.1:9", settings: ["message.timeout.ms": "500"]), logger: quiet)
        let producing = Task { try await producer.run() }
        let registry = Registry(table: TokenTable(), publisher: KafkaTokenPublisher(producer: producer, topic: "nowhere"), logger: quiet)
        registry.markReady()
        let started = ContinuousClock.now
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "a", request(hexToken(1)))
        }
        #expect(error?.status == .serviceUnavailable)
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(registry.table.record(forKey: "com.example.food/a") == nil)
        producer.shutdown()
        try await producing.value
    }
}
