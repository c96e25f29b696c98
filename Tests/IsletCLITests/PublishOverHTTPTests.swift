import ArgumentParser
import ContentService
import Foundation
import Hummingbird
import HummingbirdTesting
import IsletLinks
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing
@testable import IsletCLI

/// `islet publish-event --url`: the event through content-service's HTTP API, served for real on a
/// local port (the API's own routes, its keys and its idempotency; Kafka replaced by a list).
@Suite("islet publish-event over content-service's HTTP API", .timeLimit(.minutes(1)))
struct PublishOverHTTPTests {
    static let writerKey = String(repeating: "w", count: 40)
    static let readerKey = String(repeating: "r", count: 40)
    static let logger = Logger(label: "islet.test.cli-http") { _ in SwiftLogNoOpLogHandler() }
    static let templates = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Services/ContentService/Templates").path

    final class Published: Sendable {
        private let events = Mutex<[ActivityEvent]>([])
        var all: [ActivityEvent] { events.withLock { $0 } }
        func append(_ event: ActivityEvent) { events.withLock { $0.append(event) } }
    }

    /// content-service's HTTP API on a free port; `body` gets its base URL.
    func withServer(_ body: @escaping @Sendable (String, Published) async throws -> Void) async throws {
        let assembler = PayloadAssembler(
            templates: try TemplateLoader.load(directory: Self.templates),
            keyring: LinkKeyring(signing: try LinkKey(id: "k1", secret: Array("a-cli-test-link-key-of-32-bytes!!".utf8))))
        let engine = ContentEngine(assembler: assembler, tokens: PartitionTokens.whole(), clock: ManualClock(Date(timeIntervalSince1970: 1_795_000_000)))
        let published = Published()
        let intake = EventIntake(engine: engine) { published.append($0) }
        let keys = try BackendKeys(["orders": Self.writerKey + ":write", "dashboard": Self.readerKey + ":read"])
        let router = Router()
        router.add(middleware: HTTPErrorMiddleware(logger: Self.logger))
        ActivityHTTPAPI(intake: intake, keys: keys).addRoutes(to: router)
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: Self.logger)
        try await app.test(.live) { client in
            let port = try #require(client.port)
            try await body("http://127.0.0.1:\(port)", published)
        }
    }

    static func command(_ arguments: [String]) throws -> PublishEvent {
        try #require(try Islet.parseAsRoot(["publish-event"] + arguments) as? PublishEvent)
    }

    static let update = [
        "--activity", "order-42", "--bundle-id", "com.example.food", "--type", "DeliveryAttributes", "--urgency", "important",
        "--field", "status=out_for_delivery", "--field", "orderId=42", "--field", "progress=60", "--sequence", "7",
    ]

    @Test("the event is accepted: one line with its event id and push requests; what was published is the command's event")
    func accepted() async throws {
        try await withServer { url, published in
            let command = try Self.command(Self.update + ["--url", url, "--backend-key", Self.writerKey, "--event-id", "ev-7"])
            let target = try #require(try command.httpTarget(environment: [:]))
            let answer = try await PublishEvent.post(try command.event(), to: target, defaulted: command.defaultedFields)
            #expect(answer.accepted)
            #expect(answer.text.hasPrefix("accepted update order-42 sequence 7 (event ev-7): push requests "))
            let event = try #require(published.all.first)
            #expect(published.all.count == 1)
            #expect(event.eventId == "ev-7")
            #expect(event.bundleId == "com.example.food")
            #expect(event.fields["status"] == .string("out_for_delivery"))
            #expect(event.source == "islet-cli")
        }
    }

    @Test("with --idempotency-key a repeat of the same command gets the first answer, and nothing more is published")
    func repeatIsAnsweredOnce() async throws {
        try await withServer { url, published in
            let arguments = Self.update + ["--url", url, "--backend-key", Self.writerKey, "--idempotency-key", "order-42-out"]
            var answers: [EventPost.Answer] = []
            for _ in 0..<2 {
                // A new command each time: its defaults (event id, time) must not make another request.
                let command = try Self.command(arguments)
                answers.append(try await PublishEvent.post(try command.event(), to: try #require(try command.httpTarget(environment: [:])), defaulted: command.defaultedFields))
            }
            #expect(answers.map(\.accepted) == [true, true])
            #expect(answers[1].text.hasPrefix("already accepted (the first answer) update order-42"))
            #expect(published.all.count == 1)
        }
    }

    @Test("a refusal is one line: status, error, field and reason (no key, a read-only key, an event the template refuses)")
    func refusals() async throws {
        try await withServer { url, published in
            let event = try Self.command(Self.update).event()
            let noKey = try await PublishEvent.post(event, to: .init(baseURL: url, key: "x"))
            #expect(!noKey.accepted)
            #expect(noKey.text.hasPrefix("401 unauthenticated"))
            let reader = try await PublishEvent.post(event, to: .init(baseURL: url, key: Self.readerKey))
            #expect(reader.text.hasPrefix("403 forbidden"))
            var unknown = event
            unknown.attributesType = "NoSuchAttributes"
            let refused = try await PublishEvent.post(unknown, to: .init(baseURL: url, key: Self.writerKey))
            #expect(refused.text.hasPrefix("400 invalidField field attributesType"))
            #expect(published.all.isEmpty)
        }
    }
}

@Suite struct PublishOverHTTPArgumentTests {
    @Test("--url, else ISLET_CLI_CONTENT_URL, sends over HTTP; the key from --backend-key, ISLET_CLI_BACKEND_KEY or ISLET_CLI_GRPC_KEY; Kafka otherwise")
    func target() throws {
        let base = PublishOverHTTPTests.update
        #expect(try PublishOverHTTPTests.command(base).httpTarget(environment: [:]) == nil)
        let fromEnvironment = try PublishOverHTTPTests.command(base).httpTarget(environment: [
            "ISLET_CLI_CONTENT_URL": "http://content:8083/", "ISLET_CLI_GRPC_KEY": "g", "ISLET_CLI_BACKEND_KEY": "",
        ])
        #expect(fromEnvironment == .init(baseURL: "http://content:8083/", key: "g"))
        #expect(fromEnvironment?.url(activityId: "order 42/a") == "http://content:8083/v1/activities/order%2042%2Fa/events")
        let given = try PublishOverHTTPTests.command(base + ["--url", "https://c.example", "--backend-key", "k"]).httpTarget(environment: ["ISLET_CLI_BACKEND_KEY": "b"])
        #expect(given == .init(baseURL: "https://c.example", key: "k"))
        #expect(throws: ValidationError.self) { try PublishOverHTTPTests.command(base + ["--url", "ftp://x"]).httpTarget(environment: ["ISLET_CLI_BACKEND_KEY": "b"]) }
        #expect(throws: ValidationError.self) { try PublishOverHTTPTests.command(base + ["--url", "http://x"]).httpTarget(environment: [:]) }
        #expect(throws: ValidationError.self) { try PublishOverHTTPTests.command(base + ["--idempotency-key", "k"]).httpTarget(environment: [:]) }
    }

    @Test("an idempotency key needs --sequence; the body leaves out the event id and time the command made up, not those given")
    func body() throws {
        let withoutSequence = PublishOverHTTPTests.update.filter { $0 != "--sequence" && $0 != "7" }
        #expect(throws: (any Error).self) { try PublishOverHTTPTests.command(withoutSequence + ["--idempotency-key", "k"]) }
        let command = try PublishOverHTTPTests.command(PublishOverHTTPTests.update)
        let event = try command.event()
        #expect(command.defaultedFields == [.eventId, .occurredAt])
        let made = ActivityEventBody(event, bundleId: "com.example.food", keepingEventId: false, keepingTime: false)
        #expect(made.eventId == nil)
        #expect(made.occurredAt == nil)
        #expect(made.sequence == 7)
        let given = try PublishOverHTTPTests.command(PublishOverHTTPTests.update + ["--event-id", "e1", "--occurred-at", "2026-11-22T10:15:30Z"])
        let kept = ActivityEventBody(try given.event(), bundleId: "com.example.food", keepingEventId: !given.defaultedFields.contains(.eventId), keepingTime: !given.defaultedFields.contains(.occurredAt))
        #expect(kept.eventId == "e1")
        #expect(kept.occurredAt != nil)
    }
}
