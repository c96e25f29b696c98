import Foundation
import Hummingbird
import HummingbirdTesting
import IsletKafka
import IsletLinks
import IsletMessages
import IsletRuntime
import IsletTesting
import Logging
import ServiceLifecycle
import Synchronization
import Testing
@testable import AnalyticsConsumer
@testable import AnalyticsIngest

private let logger = testLogger("islet.test.analytics-integration")

private let key = try! LinkKey(id: "k1", secret: Array("an-integration-link-key-of-32-bytes!".utf8))
private let issued = Date().addingTimeInterval(-600)

/// A link as content-service signs it, naming the type's app (the ride app for RideAttributes).
private func url(
    _ activity: String, type: String = "DeliveryAttributes", surface: Surface = .lockScreen, element: String = "eta", sequence: Int64 = 3
) -> String {
    let app = AppTarget(bundleId: type == "RideAttributes" ? "com.example.ride" : "com.example.food", environment: .production)
    return try! DeepLinkCodec.sign(
        baseURL: "fooddelivery://order/\(activity)",
        target: TapTarget(activityId: activity, attributesType: type, surface: surface, element: element, contentSequence: sequence, app: app),
        issuedAt: issued, key: key)
}

private func tap(_ url: String, at offset: TimeInterval = 60) -> TapInput {
    TapInput(url: url, tappedAt: IsletDate.format(issued.addingTimeInterval(offset)), appVersion: "5.2.0", osVersion: "18.1")
}

struct AnalyticsTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Services run in process against the broker until stopped.
final class Running: Sendable {
    let group: ServiceGroup
    private let task: Task<Void, any Error>

    init(runtime: ServiceRuntime, services: [any Service]) {
        group = runtime.makeServiceGroup(services)
        let group = self.group
        task = Task { try await group.run() }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

func runtime(_ name: String) throws -> ServiceRuntime {
    let variables = ["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]
    return ServiceRuntime(settings: try ServiceSettings(from: .variables(variables), serviceName: name, defaultHTTPPort: 0), logger: logger)
}

func uniqueTopics() async throws -> (ingest: AnalyticsIngestApp.Topics, consumer: AnalyticsConsumerApp.Topics) {
    let suffix = UUID().uuidString.prefix(8).lowercased()
    var ingest = AnalyticsIngestApp.Topics()
    ingest.clicks = "test.clicks.\(suffix)"
    ingest.clicksRejected = "test.clicks-rejected.\(suffix)"
    var consumer = AnalyticsConsumerApp.Topics()
    consumer.clicks = ingest.clicks
    consumer.pushOutcomes = "test.outcomes.\(suffix)"
    consumer.deadLetters = "test.dlq.\(suffix)"
    let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
    _ = try await admin.createTopics([
        .init(name: ingest.clicks, partitions: 3), .init(name: ingest.clicksRejected, partitions: 2),
        .init(name: consumer.pushOutcomes, partitions: 3), .init(name: consumer.deadLetters, partitions: 1),
    ])
    return (ingest, consumer)
}

/// Every record of `topic` now, as `Message`s (read from the start to every partition's end).
func readAll<Message: IsletMessage>(_ type: Message.Type, from topic: String) async throws -> [Message] {
    try await TestBroker.readToEnd([topic]).map { try IsletJSON.decode(type, from: $0.value ?? []) }
}

@Suite("analytics against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(3)))
struct AnalyticsIntegrationTests {
    static func settings() -> IngestSettings {
        IngestSettings(keyring: LinkKeyring(signing: key), ratePerSecond: 0, sendTimeout: .seconds(10))
    }

    static func post(_ client: some TestClientProtocol, _ path: String, _ body: some Encodable) async throws -> TestResponse {
        try await client.execute(
            uri: path, method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(bytes: try IsletJSON.encode(body)))
    }

    @Test("HTTP → Kafka: accepted taps are on clicks exactly once, under their activity; rejected and repeated ones on clicks-rejected")
    func exactlyOnce() async throws {
        let (topics, _) = try await uniqueTopics()
        let runtime = try runtime("analytics-ingest-\(UUID())")
        let app = try AnalyticsIngestApp(runtime: runtime, settings: Self.settings(), topics: topics)
        let running = Running(runtime: runtime, services: [app.producer])
        let singles = (0..<12).map { tap(url("order-\($0 % 4)", element: "e\($0)")) }
        let batch = TapBatch(taps: (0..<8).map { tap(url("order-b\($0)"), at: Double(100 + $0)) } + [tap("fooddelivery://x?isl_a=1")])
        let forged = tap(url("order-1").replacingOccurrences(of: "isl_a=order-1", with: "isl_a=order-2"))

        try await Application(responder: app.responder, logger: logger).test(.router) { client in
            for single in singles {
                let response = try await Self.post(client, "/v1/taps", single)
                #expect(response.status == .ok)
            }
            let answer = try IsletJSON.decodeValue(
                BatchResult.self, from: Array(try await Self.post(client, "/v1/taps/batch", batch).body.readableBytesView))
            #expect((answer.accepted, answer.rejected) == (8, 1))
            // The app retries everything (a lost answer): nothing new is counted.
            for single in singles.prefix(5) {
                let result = try IsletJSON.decodeValue(TapResult.self, from: Array(try await Self.post(client, "/v1/taps", single).body.readableBytesView))
                #expect(result.verdict == .duplicate)
            }
            let retried = try IsletJSON.decodeValue(
                BatchResult.self, from: Array(try await Self.post(client, "/v1/taps/batch", batch).body.readableBytesView))
            #expect((retried.duplicates, retried.rejected) == (8, 1))
            let response = try await Self.post(client, "/v1/taps", forged)
            #expect(response.status == .unprocessableContent)
        }
        try await running.stop()

        let expectedIds = Set(
            (singles + batch.taps.prefix(8)).map {
                TapVerifier.clickId(url: $0.url!, tappedAt: IsletDate.parse($0.tappedAt!)!, keyring: LinkKeyring(signing: key), receivedAt: Date())
            })
        let clicks = try await readAll(ClickEvent.self, from: topics.clicks)
        #expect(Set(clicks.map(\.clickId)) == expectedIds)
        #expect(clicks.count == 20)
        #expect(Set(clicks.map(\.activityId)).isSuperset(of: ["order-0", "order-3", "order-b7"]))

        // 1 + 1 malformed in the batch, 5 + 8 repeats, 1 forged.
        let rejected = try await readAll(RejectedClick.self, from: topics.clicksRejected)
        #expect(rejected.count == 16)
        let reasons = Dictionary(grouping: rejected, by: \.reason).mapValues(\.count)
        #expect(reasons == [.missingParameter: 2, .duplicateTap: 13, .badSignature: 1])
    }

    @Test("with Kafka unreachable, a tap is answered 503 within the send timeout, and the retry counts once Kafka is back")
    func kafkaDown() async throws {
        var quiet = logger
        quiet.logLevel = .critical  // librdkafka reports every refused connection
        let down = try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:9", settings: ["message.timeout.ms": "500"]), logger: quiet)
        let producing = Task { try await down.run() }
        let recent = RecentTaps(capacity: 100)
        let metrics = IngestMetrics()
        func ingestor(_ producer: KafkaProducer, _ topic: String) -> Ingestor {
            Ingestor(
                verifier: TapVerifier(keyring: LinkKeyring(signing: key), maxTapAge: .seconds(86_400)), recent: recent,
                publisher: KafkaTapPublisher(producer: producer, clicksTopic: topic, rejectedTopic: topic), metrics: metrics, logger: quiet)
        }
        let theTap = tap(url("order-down"))
        let started = ContinuousClock.now
        let results = await ingestor(down, "nowhere").ingest([theTap], clientId: nil)
        #expect(results.map(\.verdict) == [.unavailable])
        #expect(ContinuousClock.now - started < .seconds(5))
        down.shutdown()
        try await producing.value

        let (topics, _) = try await uniqueTopics()
        let up = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let running = Task { try await up.run() }
        #expect(await ingestor(up, topics.clicks).ingest([theTap], clientId: nil).map(\.verdict) == [.accepted])
        up.shutdown()
        try await running.value
        #expect(try await readAll(ClickEvent.self, from: topics.clicks).map(\.clickId) == [TapVerifier.clickId(url: theTap.url!, tappedAt: IsletDate.parse(theTap.tappedAt!)!, keyring: LinkKeyring(signing: key), receivedAt: Date())])
    }

    @Test("analytics-consumer's counts match what was sent: taps per cell, delivered updates per type, repeats once")
    func consumerCounts() async throws {
        let (ingestTopics, topics) = try await uniqueTopics()
        let ingestRuntime = try runtime("analytics-ingest-\(UUID())")
        let ingest = try AnalyticsIngestApp(runtime: ingestRuntime, settings: Self.settings(), topics: ingestTopics)
        let consumerRuntime = try runtime("analytics-consumer-\(UUID())")
        let printed = PrintedTables()
        let consumer = try AnalyticsConsumerApp(
            runtime: consumerRuntime, settings: AnalyticsConsumerSettings(group: "analytics-\(UUID())", reportInterval: .seconds(1)),
            topics: topics, output: { printed.append($0) })
        let ingesting = Running(runtime: ingestRuntime, services: [ingest.producer])
        let consuming = Running(runtime: consumerRuntime, services: consumer.services)

        // Delivery: 3 taps on lockScreen/eta of order-1, 1 on minimal/widget of order-1, 2 on islandExpanded/courier of ride-7
        // (each on the link of another update: one link counts once a second).
        let taps = [
            tap(url("order-1"), at: 10), tap(url("order-1", sequence: 4), at: 11), tap(url("order-1", sequence: 5), at: 12),
            tap(url("order-1", surface: .minimal, element: "widget"), at: 13),
            tap(url("ride-7", type: "RideAttributes", surface: .islandExpanded, element: "courier"), at: 14),
            tap(url("ride-7", type: "RideAttributes", surface: .islandExpanded, element: "courier", sequence: 4), at: 15),
        ]
        try await Application(responder: ingest.responder, logger: logger).test(.router) { client in
            let answer = try IsletJSON.decodeValue(
                BatchResult.self, from: Array(try await Self.post(client, "/v1/taps/batch", TapBatch(taps: taps)).body.readableBytesView))
            #expect(answer.accepted == 6)
        }
        let producer = ingest.producer
        // Outcomes: 4 delivered to order-1 (one repeated), 2 to ride-7, others ignored.
        let outcomes = [
            PushOutcome(requestId: "q1", activityId: "order-1", result: .delivered, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q2", activityId: "order-1", result: .delivered, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q3", activityId: "order-1", result: .deliveredDowngraded, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q4", activityId: "order-1", result: .delivered, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q4", activityId: "order-1", result: .delivered, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q5", activityId: "ride-7", result: .delivered, attempts: 1, completedAt: Date()),
            PushOutcome(requestId: "q6", activityId: "ride-7", result: .delivered, attempts: 2, completedAt: Date()),
            PushOutcome(requestId: "q7", activityId: "ride-7", result: .failed, attempts: 3, completedAt: Date()),
        ]
        for outcome in outcomes { try await producer.send(outcome, to: topics.pushOutcomes) }
        // A repeated click record (at least once): counted once.
        let first = try await TestBroker.read(ClickEvent.self, from: ingestTopics.clicks, count: 1)
        try await producer.send(try #require(first.first), to: topics.clicks)
        // Not a click at all: dead-lettered, the loop goes on.
        try await producer.send(topic: topics.clicks, key: "order-1", value: Array("{not json".utf8))

        let expected: [ClickStats.Cell: Int] = [
            .init(app: "com.example.food", attributesType: "DeliveryAttributes", surface: "lockScreen", element: "eta"): 3,
            .init(app: "com.example.food", attributesType: "DeliveryAttributes", surface: "minimal", element: "widget"): 1,
            .init(app: "com.example.ride", attributesType: "RideAttributes", surface: "islandExpanded", element: "courier"): 2,
        ]
        // The outcomes name neither app nor type (written before outcomes did): each activity's clicks attribute them.
        let delivered: [ClickStats.AppType: Int] = [
            .init(app: "com.example.food", attributesType: "DeliveryAttributes"): 4, .init(app: "com.example.ride", attributesType: "RideAttributes"): 2,
        ]
        let deadline = ContinuousClock.now + .seconds(90)
        var stats = consumer.store.snapshot
        while ContinuousClock.now < deadline {
            stats = consumer.store.snapshot
            if stats.taps == expected, stats.delivered == delivered, stats.duplicateClicks == 1 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(stats.taps == expected)
        #expect(stats.delivered == delivered)
        #expect(stats.duplicateClicks == 1)
        #expect(stats.rows.first { $0.cell.element == "courier" }?.tapsPerDeliveredUpdate == 1.0)
        // The dead letter may be written after the counts above are complete (its partition is read on its own).
        var deadLetters: [DeadLetterRecord] = []
        while ContinuousClock.now < deadline {
            deadLetters = try await readAll(DeadLetterRecord.self, from: topics.deadLetters)
            if !deadLetters.isEmpty { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(deadLetters.count == 1)
        #expect(deadLetters.first?.service == consumerRuntime.settings.serviceName)

        try await ingesting.stop()
        try await consuming.stop()
        #expect(printed.last?.contains("RideAttributes") == true, "the table is printed")
    }
}

final class PrintedTables: Sendable {
    private let tables = Mutex<[String]>([])
    func append(_ table: String) { tables.withLock { $0.append(table) } }
    var last: String? { tables.withLock { $0.last } }
}
