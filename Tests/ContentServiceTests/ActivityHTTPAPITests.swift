import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing
import Yams
@testable import ContentService

@Suite("The backends' HTTP API, in process", .timeLimit(.minutes(1)))
struct ActivityHTTPAPITests {
    static let writerKey = String(repeating: "w", count: 40)
    static let otherWriterKey = String(repeating: "o", count: 40)
    static let readerKey = String(repeating: "r", count: 40)
    static let logger = testLogger("islet.test.content-http", level: .critical)

    let clock = ManualClock(now)
    let published = RecordingEvents()
    let ready = ReadyFlag()

    final class ReadyFlag: Sendable {
        private let state = Mutex(true)
        var value: Bool {
            get { state.withLock { $0 } }
            set { state.withLock { $0 = newValue } }
        }
    }

    func withAPI(maxBodyBytes: Int = 65_536, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        let (published, ready) = (self.published, self.ready)
        let intake = EventIntake(engine: engine, isReady: { ready.value }) { try published.publish($0) }
        let keys = try BackendKeys([
            "orders": Self.writerKey + ":read+write", "rides": Self.otherWriterKey + ":write", "dashboard": Self.readerKey + ":read",
        ])
        let router = Router()
        router.add(middleware: HTTPErrorMiddleware(logger: Self.logger))
        ActivityHTTPAPI(intake: intake, keys: keys, maxBodyBytes: maxBodyBytes).addRoutes(to: router)
        try await Application(router: router, logger: Self.logger).test(.router) { client in try await body(client) }
    }

    static func headers(_ key: String?, idempotencyKey: String? = nil) -> HTTPFields {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let key { headers[.authorization] = "Bearer \(key)" }
        if let idempotencyKey { headers[HTTPField.Name("Idempotency-Key")!] = idempotencyKey }
        return headers
    }

    static func update(sequence: Int64 = 1, status: String = "out_for_delivery", extra: String = "") -> ByteBuffer {
        ByteBuffer(string: """
            {"kind": "update", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "urgency": "important",
             "sequence": \(sequence), "fields": {"status": "\(status)", "orderId": "42", "progress": 40}\(extra)}
            """)
    }

    static func error(_ response: TestResponse) throws -> HTTPAPIError.Body {
        #expect(response.headers[.contentType] == "application/json")
        return try IsletJSON.decodeValue(HTTPAPIError.Body.self, from: Array(response.body.readableBytesView))
    }

    static func reply(_ response: TestResponse) throws -> ActivityHTTPAPI.EventReply {
        try IsletJSON.decodeValue(ActivityHTTPAPI.EventReply.self, from: Array(response.body.readableBytesView))
    }

    @Test("an event is published and answered 202 with its event id and the ids of its push requests")
    func publishes() async throws {
        try await withAPI { client in
            try await client.execute(
                uri: "/v1/activities/order-42/events", method: .post, headers: Self.headers(Self.writerKey),
                body: Self.update(extra: #", "eventId": "ev-1""#)
            ) { response in
                #expect(response.status == .accepted)
                let reply = try Self.reply(response)
                #expect(reply == .init(
                    activityId: "order-42", bundleId: "com.example.food", eventId: "ev-1",
                    requestIds: [RequestIds.content(bundleId: "com.example.food", activityId: "order-42", eventId: "ev-1")]))
            }
            let event = try #require(published.events.last)
            #expect(event.activityId == "order-42" && event.bundleId == "com.example.food" && event.kind == .update)
            #expect(event.sequence == 1 && event.urgency == .important && event.fields["progress"] == .integer(40))
            #expect(event.occurredAt == clock.date, "occurredAt defaults to now")
            #expect(event.source == "orders", "source defaults to the backend's name")
            // Without an event id or a key: a new one.
            try await client.execute(
                uri: "/v1/activities/order-43/events", method: .post, headers: Self.headers(Self.writerKey), body: Self.update()
            ) { response in
                #expect(response.status == .accepted)
                let reply = try Self.reply(response)
                #expect(UUID(uuidString: reply.eventId) != nil)
            }
            #expect(published.events.count == 2)
        }
    }

    @Test("Idempotency-Key: a repeat gets the first answer and publishes nothing; the key for another body is 422; a failure of the moment frees it")
    func idempotency() async throws {
        try await withAPI { client in
            let uri = "/v1/activities/order-42/events"
            var first: ActivityHTTPAPI.EventReply?
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-1"), body: Self.update()) {
                #expect($0.status == .accepted)
                first = try? Self.reply($0)
            }
            // The repeat, the key quoted as a structured-field string this time.
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: #""k-1""#), body: Self.update()) {
                #expect($0.status == .accepted)
                #expect($0.headers[HTTPField.Name("Idempotent-Replayed")!] == "true")
                #expect((try? Self.reply($0)) == first)
            }
            #expect(published.events.count == 1)
            // The same key for another body, or another activity: refused, nothing published.
            for (other, body) in [(uri, Self.update(sequence: 2)), ("/v1/activities/order-7/events", Self.update())] {
                try await client.execute(uri: other, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-1"), body: body) {
                    #expect($0.status == .unprocessableContent)
                    #expect((try? Self.error($0))?.error == .idempotencyKeyReused)
                }
            }
            #expect(published.events.count == 1)
            // Another backend's key of the same name is its own.
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.otherWriterKey, idempotencyKey: "k-1"), body: Self.update()) {
                #expect($0.status == .accepted)
                #expect((try? Self.reply($0))?.eventId != first?.eventId)
            }
            #expect(published.events.count == 2)

            // Kafka does not acknowledge: 503, and the key is free for the retry.
            published.fail(true)
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-2"), body: Self.update(sequence: 3)) {
                #expect($0.status == .serviceUnavailable)
                #expect($0.headers[.retryAfter] != nil)
                #expect((try? Self.error($0))?.error == .unavailable)
            }
            published.fail(false)
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-2"), body: Self.update(sequence: 3)) {
                #expect($0.status == .accepted)
                #expect($0.headers[HTTPField.Name("Idempotent-Replayed")!] == nil)
            }
            #expect(published.events.count == 3)

            // A refusal is not kept: the retry is judged again (it may depend on the moment).
            let pizza = ByteBuffer(string: #"{"kind": "update", "bundleId": "com.example.food", "attributesType": "PizzaAttributes", "sequence": 4}"#)
            for _ in 0..<2 {
                try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-3"), body: pizza) {
                    #expect($0.status == .badRequest)
                    #expect($0.headers[HTTPField.Name("Idempotent-Replayed")!] == nil)
                    #expect((try? Self.error($0))?.field == "attributesType")
                }
            }
            #expect(published.events.count == 3)
        }
        // Another instance (its own answers) does the work again for the same call, but publishes
        // the same event id, which the owner ignores as a repeat; the key with another body there
        // is another event.
        let firstEventId = try #require(published.events.first?.eventId)
        try await withAPI { client in
            let uri = "/v1/activities/order-42/events"
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-1"), body: Self.update()) {
                #expect($0.status == .accepted)
                #expect((try? Self.reply($0))?.eventId == firstEventId)
            }
        }
        try await withAPI { client in
            let uri = "/v1/activities/order-42/events"
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey, idempotencyKey: "k-1"), body: Self.update(sequence: 9)) {
                #expect($0.status == .accepted)
                #expect((try? Self.reply($0))?.eventId != firstEventId)
            }
        }
    }

    @Test("every refusal is a JSON 4xx (or 503) naming the problem, and publishes nothing")
    func refusals() async throws {
        try await withAPI(maxBodyBytes: 1_024) { client in
            let uri = "/v1/activities/order-42/events"
            let cases: [(String, HTTPRequest.Method, HTTPFields, ByteBuffer, HTTPResponse.Status, HTTPAPIError.Code, String?)] = [
                ("no key", .post, Self.headers(nil), Self.update(), .unauthorized, .unauthenticated, nil),
                ("an unknown key", .post, Self.headers(String(repeating: "x", count: 40)), Self.update(), .unauthorized, .unauthenticated, nil),
                ("a key that may only read", .post, Self.headers(Self.readerKey), Self.update(), .forbidden, .forbidden, nil),
                ("not JSON", .post, [.authorization: "Bearer \(Self.writerKey)", .contentType: "text/plain"], Self.update(), .unsupportedMediaType, .unsupportedMediaType, nil),
                ("too large", .post, Self.headers(Self.writerKey), Self.update(extra: #", "source": "\#(String(repeating: "s", count: 2_000))""#), .contentTooLarge, .bodyTooLarge, nil),
                ("broken JSON", .post, Self.headers(Self.writerKey), ByteBuffer(string: "{\"kind\":"), .badRequest, .malformedBody, nil),
                ("no app", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "update", "attributesType": "DeliveryAttributes", "sequence": 1}"#), .badRequest, .malformedBody, "bundleId"),
                ("a kind that does not exist", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "pause", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1}"#), .badRequest, .invalidField, "kind"),
                ("no template", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "update", "bundleId": "com.example.food", "attributesType": "PizzaAttributes", "sequence": 1}"#), .badRequest, .invalidField, "attributesType"),
                ("a field of the wrong type", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "update", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "fields": {"status": "arriving", "orderId": "42", "progress": "far"}}"#), .badRequest, .invalidField, "fields.progress"),
                ("a negative sequence", .post, Self.headers(Self.writerKey), Self.update(sequence: -1), .badRequest, .invalidField, "sequence"),
                ("another activity id in the body", .post, Self.headers(Self.writerKey), Self.update(extra: #", "activityId": "order-7""#), .badRequest, .invalidField, "activityId"),
                ("attributes in an update", .post, Self.headers(Self.writerKey), Self.update(extra: #", "attributes": {"orderId": "42"}"#), .badRequest, .invalidField, "attributes"),
                ("a start target in an update", .post, Self.headers(Self.writerKey), Self.update(extra: #", "startTarget": {"app": {"bundleId": "com.example.food", "environment": "production"}, "deviceId": "d1"}"#), .badRequest, .invalidField, "startTarget"),
                ("a push-to-start without a device", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "start", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "startTarget": {"app": {"bundleId": "com.example.food", "environment": "production"}, "deviceId": ""}}"#), .badRequest, .invalidField, "startTarget.deviceId"),
                ("a push-to-start to a device and a user at once", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "start", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "startTarget": {"app": {"bundleId": "com.example.food", "environment": "production"}, "deviceId": "d1", "userId": "ana"}}"#), .badRequest, .invalidField, "startTarget.deviceId"),
                ("a push-to-start to nobody", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "start", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "startTarget": {"app": {"bundleId": "com.example.food", "environment": "production"}}}"#), .badRequest, .invalidField, "startTarget.deviceId"),
                ("a push-to-start to a user without a device", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "start", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "fields": {"orderId": "42", "status": "placed"}, "attributes": {"orderId": "42"}, "startTarget": {"app": {"bundleId": "com.example.food", "environment": "production"}, "userId": "nobody"}}"#), .badRequest, .invalidField, "startTarget.userId"),
                ("a push-to-start to an unknown environment", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "start", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 1, "startTarget": {"app": {"bundleId": "com.example.food", "environment": "staging"}, "deviceId": "d1"}}"#), .badRequest, .invalidField, "startTarget.app.environment"),
                ("a dismissal on an update", .post, Self.headers(Self.writerKey), Self.update(extra: #", "presentation": {"dismissal": "immediate"}"#), .badRequest, .invalidField, "presentation.dismissal"),
                ("a relevance above 100", .post, Self.headers(Self.writerKey), Self.update(extra: #", "presentation": {"relevanceScore": 500}"#), .badRequest, .invalidField, "presentation.relevanceScore"),
                ("an alert with a title and a title key", .post, Self.headers(Self.writerKey), Self.update(extra: #", "presentation": {"alert": {"title": "Here", "titleLocKey": "HERE"}}"#), .badRequest, .invalidField, "presentation.alert.titleLocKey"),
                ("an alert translation under a tag not canonical", .post, Self.headers(Self.writerKey), Self.update(extra: #", "presentation": {"alert": {"title": "Here", "translations": {"zh_Hans": {"title": "到了"}}}}"#), .badRequest, .invalidField, "presentation.alert.translations.zh_Hans"),
                ("a bad app id", .post, Self.headers(Self.writerKey), ByteBuffer(string: #"{"kind": "update", "bundleId": "com/evil", "attributesType": "DeliveryAttributes", "sequence": 1}"#), .badRequest, .invalidField, "bundleId"),
                ("an idempotency key with spaces", .post, Self.headers(Self.writerKey, idempotencyKey: "two words"), Self.update(), .badRequest, .invalidField, "Idempotency-Key"),
                ("an idempotency key too long", .post, Self.headers(Self.writerKey, idempotencyKey: String(repeating: "k", count: 256)), Self.update(), .badRequest, .invalidField, "Idempotency-Key"),
                ("a GET of the events", .get, Self.headers(Self.writerKey), ByteBuffer(), .notFound, .notFound, nil),
            ]
            for (name, method, headers, body, status, code, field) in cases {
                try await client.execute(uri: uri, method: method, headers: headers, body: body) { response in
                    #expect(response.status == status, "\(name)")
                    let error = try Self.error(response)
                    #expect(error.error == code, "\(name): \(error.reason)")
                    #expect(error.field == field, "\(name): \(error.reason)")
                    if status == .unauthorized { #expect(response.headers[.wwwAuthenticate] == "Bearer") }
                }
            }
            // An activity id the topics cannot carry, in the path.
            try await client.execute(uri: "/v1/activities/a:b/events", method: .post, headers: Self.headers(Self.writerKey), body: Self.update()) {
                #expect($0.status == .badRequest)
                #expect((try? Self.error($0))?.field == "activityId")
            }
            // Two keys: which one is meant?
            var twoKeys = Self.headers(Self.writerKey)
            twoKeys.append(HTTPField(name: .authorization, value: "Bearer \(Self.otherWriterKey)"))
            try await client.execute(uri: uri, method: .post, headers: twoKeys, body: Self.update()) { #expect($0.status == .unauthorized) }
            // Still reading its state: 503 with Retry-After.
            ready.value = false
            try await client.execute(uri: uri, method: .post, headers: Self.headers(Self.writerKey), body: Self.update()) {
                #expect($0.status == .serviceUnavailable)
                #expect($0.headers[.retryAfter] == "5")
            }
            ready.value = true
            #expect(published.events.isEmpty)
        }
    }
}

@Suite("Idempotency keys' answers")
struct IdempotentRepliesTests {
    @Test("first, in progress, answered, reused; a refusal frees the key; forgotten after their lifetime or beyond the capacity")
    func lifecycle() throws {
        let replies = IdempotentReplies(lifetime: .seconds(60), capacity: 2)
        let (a, b) = ([UInt8](repeating: 1, count: 32), [UInt8](repeating: 2, count: 32))
        guard case .first(let claim) = replies.claim("k1", fingerprint: a, now: now) else { Issue.record("not first"); return }
        #expect(replies.claim("k1", fingerprint: a, now: now) == .inProgress)
        #expect(replies.claim("k1", fingerprint: b, now: now) == .reused)
        replies.finish("k1", claim: claim, with: .init(status: 202, body: [1]))
        #expect(replies.claim("k1", fingerprint: a, now: now + 59) == .answered(.init(status: 202, body: [1])))
        guard case .first(let again) = replies.claim("k1", fingerprint: b, now: now + 61) else { Issue.record("not new after its lifetime"); return }
        // A refusal frees the key: the retry is judged again.
        replies.finish("k1", claim: again, with: nil)
        guard case .first(let third) = replies.claim("k1", fingerprint: a, now: now + 62) else { Issue.record("not freed"); return }
        // A finish of a claim that is not the key's any more changes nothing.
        replies.finish("k1", claim: again, with: .init(status: 202, body: [9]))
        #expect(replies.claim("k1", fingerprint: a, now: now + 62) == .inProgress)
        replies.finish("k1", claim: third, with: .init(status: 202, body: [3]))
        for (index, key) in ["k2", "k3", "k4"].enumerated() {
            guard case .first = replies.claim(key, fingerprint: a, now: now + 63 + Double(index)) else { Issue.record("\(key) not first"); return }
        }
        #expect(replies.count <= 3, "the oldest go beyond the capacity")
        #expect(replies.claim("k4", fingerprint: a, now: now + 66) == .inProgress)
    }
}

@Suite("docs/openapi.yaml against the server's routes")
struct OpenAPIDocumentTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs/openapi.yaml")

    static let methods: Set<String> = ["get", "put", "post", "delete", "patch", "head", "options"]

    @Test("an OpenAPI 3.1 document whose operations are exactly the routes the server answers, each with its refusals")
    func matchesRoutes() async throws {
        let yaml = try String(contentsOf: Self.document, encoding: .utf8)
        let root = try #require(try Yams.load(yaml: yaml) as? [String: Any])
        #expect((root["openapi"] as? String)?.hasPrefix("3.1.") == true)
        let paths = try #require(root["paths"] as? [String: Any])
        var documented: Set<String> = []
        for (path, item) in paths {
            let operations = try #require(item as? [String: Any], "\(path)")
            for (method, operation) in operations where Self.methods.contains(method) {
                documented.insert("\(method.uppercased()) \(path)")
                let responses = try #require((operation as? [String: Any])?["responses"] as? [String: Any], "\(method) \(path)")
                for status in ["400", "401", "403", "503"] { #expect(responses[status] != nil, "\(method) \(path) documents \(status)") }
            }
        }
        #expect(documented == Set(ActivityHTTPAPI.routes.map { "\($0.method) \($0.path)" }))

        // The server really answers each: a call without a key is refused as unauthenticated, not
        // as an unknown route; a path the document does not have is an unknown route.
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole())
        let router = Router()
        router.add(middleware: HTTPErrorMiddleware(logger: ActivityHTTPAPITests.logger))
        ActivityHTTPAPI(intake: EventIntake(engine: engine) { _ in }, keys: try BackendKeys([:]))
            .addRoutes(to: router)
        try await Application(router: router, logger: ActivityHTTPAPITests.logger).test(.router) { client in
            for route in ActivityHTTPAPI.routes {
                let uri = route.path.replacing(/\{[^}]+\}/, with: "x1")
                try await client.execute(uri: uri, method: route.method, headers: [.contentType: "application/json"], body: ByteBuffer(string: "{}")) {
                    #expect($0.status == .unauthorized, "\(route.method) \(uri)")
                }
            }
            try await client.execute(uri: "/v1/nothing-here", method: .get) { #expect($0.status == .notFound) }
        }
    }
}
