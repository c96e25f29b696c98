import Foundation
import Hummingbird
import HummingbirdTesting
import IsletLinks
import IsletMessages
import IsletTesting
import Prometheus
import Testing
@testable import AnalyticsIngest
import IsletRuntime

@Suite("analytics-ingest's HTTP API, in process")
struct HTTPAPITests {
    let publisher = RecordingPublisher()
    let clock = ManualClock(TestLinks.now)
    let registry = PrometheusCollectorRegistry()

    static let settings = IngestSettings(
        keyring: TestLinks.keyring, maxBodyBytes: 16_384, maxBatch: 5, ratePerSecond: 1, rateBurst: 3, rateClients: 100,
        clientIdentity: .forwardedHeader("X-Forwarded-For", trusting: try! TrustedProxies(["127.0.0.1", "::1"])), recentTaps: 1_000,
        maxTapAge: .seconds(86_400))

    func withAPI(
        // Live: requests come over a real socket, from 127.0.0.1, the proxy the settings trust.
        settings: IngestSettings = Self.settings, testing: TestingSetup = .live, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let metrics = IngestMetrics(factory: PrometheusMetricsFactory(registry: registry))
        let ingestor = Ingestor(
            verifier: TapVerifier(keyring: settings.keyring, maxTapAge: settings.maxTapAge), recent: RecentTaps(capacity: settings.recentTaps),
            publisher: publisher, metrics: metrics, logger: quietLogger,
            clock: clock)
        let limiter = RateLimiter(ratePerSecond: settings.ratePerSecond, burst: settings.rateBurst, maxClients: settings.rateClients, clock: clock)
        let router = Router(context: IngestRequestContext.self)
        IngestHTTPAPI(ingestor: ingestor, limiter: limiter, settings: settings, metrics: metrics, logger: quietLogger).addRoutes(to: router)
        try await Application(router: router, logger: quietLogger).test(testing) { client in try await body(client) }
    }

    /// Each test request comes from its own client unless told otherwise (the rate limit has its own test).
    static func headers(client: String = "2001:db8::" + String(UInt16.random(in: 1...UInt16.max), radix: 16) + ":" + String(UInt16.random(in: 1...UInt16.max), radix: 16)) -> HTTPFields {
        [.contentType: "application/json", .init("X-Forwarded-For")!: "10.0.0.1, \(client)"]
    }

    static func body(_ value: some Encodable) throws -> ByteBuffer { ByteBuffer(bytes: try IsletJSON.encode(value)) }
    static func result(_ response: TestResponse) throws -> TapResult {
        try IsletJSON.decodeValue(TapResult.self, from: Array(response.body.readableBytesView))
    }
    static func apiError(_ response: TestResponse) throws -> IngestAPIError.Body {
        try IsletJSON.decodeValue(IngestAPIError.Body.self, from: Array(response.body.readableBytesView))
    }

    @Test("a signed tap is accepted after its ClickEvent is published, keyed by the activity, with every field from the link")
    func accepted() async throws {
        let tap = TestLinks.tap()
        try await withAPI { client in
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(tap)) { (response) async throws in
                #expect(response.status == .ok)
                let result = try Self.result(response)
                #expect(result.verdict == .accepted)
                #expect(result.clickId == TapVerifier.clickId(url: tap.url!, tappedAt: IsletDate.parse(tap.tappedAt!)!, keyring: TestLinks.keyring, receivedAt: TestLinks.now))
            }
        }
        let click = try #require(publisher.clicks.first)
        #expect(publisher.records.count == 1)
        #expect(click.key == "order-42")
        #expect(click.activityId == "order-42")
        #expect(click.attributesType == "DeliveryAttributes")
        #expect(click.surface == .islandExpanded)
        #expect(click.element == "eta")
        #expect(click.contentSequence == 7)
        #expect(click.app == TestLinks.food)
        #expect(click.keyId == "k2")
        #expect(click.appVersion == "5.2.0" && click.osVersion == "18.1")
        #expect(click.issuedAt == TestLinks.issued)
        #expect(click.tappedAt == TestLinks.issued.addingTimeInterval(120))
        #expect(click.receivedAt == TestLinks.now)
        #expect(click.clickId.count == 32)
    }

    @Test("a link signed before links named their app is still accepted: its click has no app; a sandbox app's link gives its environment")
    func linksWithoutApp() async throws {
        let old = TestLinks.tap(TestLinks.url(TestLinks.target("order-1", app: nil)))
        let sandbox = TestLinks.tap(TestLinks.url(TestLinks.target("order-2", app: AppTarget(bundleId: "com.example.food", environment: .sandbox))))
        #expect(!old.url!.contains("isl_p="))
        try await withAPI { client in
            for tap in [old, sandbox] {
                try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(tap)) { (response) async throws in
                    #expect(response.status == .ok)
                    #expect(try Self.result(response).verdict == .accepted)
                }
            }
        }
        #expect(publisher.clicks.map(\.activityId) == ["order-1", "order-2"])
        #expect(publisher.clicks.first?.app == nil)
        #expect(publisher.clicks.last?.app == AppTarget(bundleId: "com.example.food", environment: .sandbox))
    }

    /// One case per way a tap can fail, with the reason and field the answer must name.
    static let rejections: [(name: String, tap: TapInput, reason: ClickRejectionReason, field: String)] = {
        let good = TestLinks.url()
        func replacing(_ name: String, with value: String) -> String {
            good.replacingOccurrences(of: #"\#(name)=[^&]*"#, with: "\(name)=\(value)", options: .regularExpression)
        }
        let signature = String(good.split(separator: "=").last!)
        let flipped = (signature.first == "A" ? "B" : "A") + signature.dropFirst()
        return [
            ("edited activity id", TestLinks.tap(replacing("isl_a", with: "order-43")), .badSignature, "url"),
            ("edited app parameter", TestLinks.tap(good.replacingOccurrences(of: "tab=status", with: "tab=refund")), .badSignature, "url"),
            ("another app named", TestLinks.tap(replacing("isl_p", with: "com.example.ride")), .badSignature, "url"),
            ("the app respelled", TestLinks.tap(replacing("isl_p", with: "com.example.food~production")), .invalidParameter, "url"),
            ("the app removed", TestLinks.tap(good.replacingOccurrences(of: #"&isl_p=[^&]*"#, with: "", options: .regularExpression)), .badSignature, "url"),
            ("forged signature", TestLinks.tap(replacing("isl_sig", with: flipped)), .badSignature, "url"),
            ("signed by a key not accepted", TestLinks.tap(TestLinks.url(key: TestLinks.stranger)), .unknownKeyId, "url"),
            (
                "tapped 12 h 1 s after issue",
                TestLinks.tap(
                    TestLinks.url(issuedAt: TestLinks.now.addingTimeInterval(-(12 * 3_600 + 61))), tappedAt: TestLinks.now.addingTimeInterval(-60)),
                .expired, "url"
            ),
            ("no scheme", TestLinks.tap("order/42?isl_a=x"), .malformedUrl, "url"),
            ("with a fragment", TestLinks.tap(good + "#top"), .malformedUrl, "url"),
            ("no url field", TestInputs.without(\.url), .malformedUrl, "url"),
            ("a parameter missing", TestLinks.tap(good.replacingOccurrences(of: #"&isl_q=[^&]*"#, with: "", options: .regularExpression)), .missingParameter, "url"),
            ("a parameter twice", TestLinks.tap(good + "&isl_a=order-43"), .duplicateParameter, "url"),
            ("an unknown surface", TestLinks.tap(replacing("isl_s", with: "homeScreen")), .invalidParameter, "url"),
            ("a sequence that is not a number", TestLinks.tap(replacing("isl_q", with: "seven")), .invalidParameter, "url"),
            ("no tappedAt", TestInputs.without(\.tappedAt), .invalidParameter, "tappedAt"),
            ("tappedAt not a date", TapInput(url: good, tappedAt: "yesterday", appVersion: "5", osVersion: "18"), .invalidParameter, "tappedAt"),
            ("tappedAt in the future", TestLinks.tap(tappedAt: TestLinks.now.addingTimeInterval(3_600)), .invalidParameter, "tappedAt"),
            ("a tap older than the maximum age", TestLinks.tap(tappedAt: TestLinks.now.addingTimeInterval(-86_401)), .expired, "tappedAt"),
            ("no appVersion", TestLinks.tap(appVersion: nil), .invalidParameter, "appVersion"),
            ("an osVersion with a control character", TestLinks.tap(osVersion: "18\u{0}1"), .invalidParameter, "osVersion"),
        ]
    }()

    @Test("every rejection reason: 422 naming the reason and field, and a RejectedClick with the raw input on clicks-rejected")
    func everyRejection() async throws {
        let cases = Self.rejections
        try await withAPI { client in
            for (name, tap, reason, field) in cases {
                try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(tap)) { (response) async throws in
                    #expect(response.status == .unprocessableContent, "\(name)")
                    let result = try Self.result(response)
                    #expect(result.verdict == .rejected, "\(name)")
                    #expect(result.error == reason.rawValue, "\(name): \(result)")
                    #expect(result.field == field, "\(name): \(result)")
                    #expect(result.reason?.isEmpty == false, "\(name)")
                }
            }
        }
        let rejected = publisher.rejected
        #expect(publisher.clicks.isEmpty)
        #expect(rejected.map(\.reason) == cases.map(\.reason))
        for (record, testCase) in zip(rejected, cases) {
            #expect(record.url == (testCase.tap.url ?? ""), "\(testCase.name)")
            #expect(record.receivedAt == TestLinks.now)
            #expect(record.clientId != nil)
        }
        let covered = Set(cases.map(\.reason))
        #expect(covered == Set(ClickRejectionReason.knownValues).subtracting([.duplicateTap]), "every reason but duplicateTap (its own test)")
        let text = registry.emitted
        #expect(text.contains(#"islet_analytics_rejected_total{reason="badSignature"} 5"#))
        #expect(text.contains(#"islet_analytics_taps_total{verdict="rejected"} \#(cases.count)"#))
    }

    @Test("a batch gets a verdict per tap, in order: accepted, rejected and duplicate side by side")
    func mixedBatch() async throws {
        let first = TestLinks.tap(TestLinks.url(TestLinks.target("order-1")))
        let second = TestLinks.tap(TestLinks.url(TestLinks.target("order-2", surface: .minimal, element: "widget")))
        let forged = TestLinks.tap(TestLinks.url(key: TestLinks.stranger))
        let batch = TapBatch(taps: [first, forged, second, first, TestLinks.tap(appVersion: "")])
        try await withAPI { client in
            try await client.execute(uri: "/v1/taps/batch", method: .post, headers: Self.headers(), body: try Self.body(batch)) { (response) async throws in
                #expect(response.status == .ok)
                let answer = try IsletJSON.decodeValue(BatchResult.self, from: Array(response.body.readableBytesView))
                #expect(answer.results.map(\.verdict) == [.accepted, .rejected, .accepted, .duplicate, .rejected])
                #expect(answer.results[1].error == "unknownKeyId")
                #expect(answer.results[4].field == "appVersion")
                #expect(answer.results[3].clickId == answer.results[0].clickId)
                #expect((answer.accepted, answer.rejected, answer.duplicates, answer.unavailable) == (2, 2, 1, 0))
            }
        }
        #expect(publisher.clicks.map(\.activityId) == ["order-1", "order-2"])
        #expect(publisher.rejected.map(\.reason) == [.unknownKeyId, .duplicateTap, .invalidParameter])
    }

    @Test("the same tap counts once; the same link tapped at another time counts again, but not within a second of the server's clock")
    func duplicates() async throws {
        let tap = TestLinks.tap()
        let later = TestLinks.tap(tappedAt: TestLinks.issued.addingTimeInterval(300))
        let latest = TestLinks.tap(tappedAt: TestLinks.issued.addingTimeInterval(400))
        let clock = self.clock
        try await withAPI { client in
            var ids: [String?] = []
            // (tap, verdict, seconds the server's clock moves on first)
            for (body, expected, wait) in [
                (tap, TapResult.Verdict.accepted, 0), (tap, .duplicate, 0), (later, .duplicate, 0), (later, .accepted, 1), (tap, .duplicate, 0),
                (latest, .duplicate, 0.5), (latest, .accepted, 0.5),
            ] {
                clock.advance(by: .seconds(wait))
                try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(body)) { (response) async throws in
                    #expect(response.status == .ok)
                    let result = try Self.result(response)
                    #expect(result.verdict == expected)
                    ids.append(result.clickId)
                }
            }
            // A tap too soon after its link's last click is answered as a repeat of that click.
            #expect(ids[0] == ids[1] && ids[1] == ids[2] && ids[2] == ids[4])
            #expect(ids[3] != ids[0] && ids[5] == ids[3] && ids[6] != ids[3])
        }
        #expect(publisher.clicks.count == 3)
        #expect(publisher.rejected.map(\.reason) == [.duplicateTap, .duplicateTap, .duplicateTap, .duplicateTap])
    }

    @Test("Kafka down: 503 with Retry-After and nothing counted; the app's retry is then accepted, not a duplicate")
    func kafkaDown() async throws {
        let tap = TestLinks.tap()
        publisher.refuse(true)
        try await withAPI { client in
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(tap)) { (response) async throws in
                #expect(response.status == .serviceUnavailable)
                #expect(response.headers[.retryAfter] == "1")
                #expect(try Self.result(response).verdict == .unavailable)
            }
            let batch = TapBatch(taps: [TestLinks.tap(TestLinks.url(TestLinks.target("order-9"))), TestLinks.tap(appVersion: nil)])
            try await client.execute(uri: "/v1/taps/batch", method: .post, headers: Self.headers(), body: try Self.body(batch)) { (response) async throws in
                #expect(response.status == .serviceUnavailable)
                let answer = try IsletJSON.decodeValue(BatchResult.self, from: Array(response.body.readableBytesView))
                #expect(answer.results.map(\.verdict) == [.unavailable, .unavailable])
            }
            publisher.refuse(false)
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(tap)) { (response) async throws in
                #expect(response.status == .ok)
                #expect(try Self.result(response).verdict == .accepted)
            }
        }
        #expect(publisher.clicks.count == 1)
        #expect(registry.emitted.contains(#"islet_analytics_taps_total{verdict="unavailable"} 3"#))
    }

    @Test("rate limit per client: a burst, then 429 with Retry-After; time refills it; other clients are not affected")
    func rateLimit() async throws {
        let clock = self.clock
        try await withAPI { client in
            let alice = Self.headers(client: "192.0.2.1")
            for index in 0..<3 {
                let tap = TestLinks.tap(TestLinks.url(TestLinks.target("order-\(index)")))
                try await client.execute(uri: "/v1/taps", method: .post, headers: alice, body: try Self.body(tap)) { #expect($0.status == .ok) }
            }
            try await client.execute(uri: "/v1/taps", method: .post, headers: alice, body: try Self.body(TestLinks.tap())) { (response) async throws in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[.retryAfter] == "1")
                #expect(try Self.apiError(response).error == "rateLimited")
            }
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(client: "192.0.2.2"), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .ok)
            }
            clock.advance(by: .milliseconds(999))
            try await client.execute(uri: "/v1/taps/batch", method: .post, headers: alice, body: try Self.body(TapBatch(taps: [TestLinks.tap()]))) {
                #expect($0.status == .tooManyRequests)
            }
            clock.advance(by: .milliseconds(1))
            try await client.execute(uri: "/v1/taps", method: .post, headers: alice, body: try Self.body(TestLinks.tap())) { (response) async throws in
                #expect(response.status == .ok)
                #expect(try Self.result(response).verdict == .duplicate)
            }
        }
        #expect(registry.emitted.contains(#"islet_analytics_refused_requests_total{error="rateLimited"} 2"#))
    }

    @Test("caps: body size (413), batch size (413), empty batch, not JSON, wrong media type — refused before anything is written")
    func caps() async throws {
        try await withAPI { client in
            let huge = TapInput(url: String(repeating: "a", count: 20_000), tappedAt: nil, appVersion: nil, osVersion: nil)
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: try Self.body(huge)) { (response) async throws in
                #expect(response.status == .contentTooLarge)
                #expect(try Self.apiError(response).error == "bodyTooLarge")
            }
            let six = TapBatch(taps: (0..<6).map { _ in TestLinks.tap() })
            try await client.execute(uri: "/v1/taps/batch", method: .post, headers: Self.headers(), body: try Self.body(six)) { (response) async throws in
                #expect(response.status == .contentTooLarge)
                let error = try Self.apiError(response)
                #expect(error.error == "batchTooLarge" && error.field == "taps")
            }
            try await client.execute(uri: "/v1/taps/batch", method: .post, headers: Self.headers(), body: try Self.body(TapBatch(taps: []))) { (response) async throws in
                #expect(response.status == .badRequest)
                #expect(try Self.apiError(response).field == "taps")
            }
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: ByteBuffer(string: #"{"url": 42}"#)) { (response) async throws in
                #expect(response.status == .badRequest)
                let error = try Self.apiError(response)
                #expect(error.error == "malformedBody" && error.field == "url")
            }
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(), body: ByteBuffer(string: "{")) {
                #expect($0.status == .badRequest)
            }
            try await client.execute(
                uri: "/v1/taps", method: .post, headers: [.contentType: "text/plain"], body: try Self.body(TestLinks.tap())
            ) { #expect($0.status == .unsupportedMediaType) }
            try await client.execute(uri: "/v1/nothing", method: .post, headers: Self.headers(), body: ByteBuffer(string: "{}")) { (response) async throws in
                #expect(response.status == .notFound)
                #expect(try Self.apiError(response).error == "notFound")
            }
        }
        #expect(publisher.records.isEmpty)
        #expect(registry.emitted.contains(#"islet_analytics_refused_requests_total{error="bodyTooLarge"} 1"#))
    }

    @Test("the bench route exists only when enabled, and writes nothing")
    func benchRoute() async throws {
        try await withAPI { client in
            try await client.execute(uri: "/bench/noop", method: .post, headers: Self.headers(), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .notFound)
            }
        }
        var settings = Self.settings
        settings.benchRoute = true
        try await withAPI(settings: settings) { client in
            try await client.execute(uri: "/bench/noop", method: .post, headers: Self.headers(), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .noContent)
            }
        }
        #expect(publisher.records.isEmpty)
    }

    @Test("the peer address identifies the client when no proxy header is configured")
    func peerAddress() async throws {
        var settings = Self.settings
        settings.clientIdentity = .peerAddress
        settings.rateBurst = 1
        try await withAPI(settings: settings, testing: .live) { client in
            // Over a real socket: the peer is 127.0.0.1 whatever X-Forwarded-For says.
            try await client.execute(
                uri: "/v1/taps", method: .post, headers: Self.headers(client: "a"), body: try Self.body(TestLinks.tap(appVersion: nil))
            ) { #expect($0.status == .unprocessableContent) }
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(client: "b"), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .tooManyRequests)
            }
        }
        #expect(publisher.rejected.map(\.clientId) == ["127.0.0.1"])
        #expect(publisher.clicks.isEmpty)
    }

    @Test("X-Forwarded-For from a peer that is not a trusted proxy is the client's own claim: ignored, the peer is the client")
    func untrustedForwardedFor() async throws {
        var settings = Self.settings
        settings.clientIdentity = .forwardedHeader("X-Forwarded-For", trusting: try TrustedProxies(["10.9.9.9"]))
        settings.rateBurst = 1
        try await withAPI(settings: settings) { client in
            // Two "different" clients by the header, one peer: the second is rate limited.
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(client: "192.0.2.10"), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .ok)
            }
            try await client.execute(uri: "/v1/taps", method: .post, headers: Self.headers(client: "192.0.2.11"), body: try Self.body(TestLinks.tap())) {
                #expect($0.status == .tooManyRequests)
            }
        }
    }
}

enum TestInputs {
    static func without(_ field: WritableKeyPath<TapInput, String?>) -> TapInput {
        var tap = TestLinks.tap()
        tap[keyPath: field] = nil
        return tap
    }
}

extension PrometheusCollectorRegistry {
    var emitted: String {
        var buffer: [UInt8] = []
        emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

}

@Suite("Trusted proxies: whose forwarded-for is believed, and which entry is the client")
struct TrustedProxiesTests {
    @Test("addresses and networks, IPv4 and IPv6 (IPv4-mapped counts as IPv4)")
    func matching() throws {
        let proxies = try TrustedProxies(["10.0.0.0/8", "192.0.2.7", "2001:db8:1::/48"])
        #expect(proxies.contains("10.200.3.4") && proxies.contains("192.0.2.7") && proxies.contains("2001:db8:1:ffff::1"))
        #expect(proxies.contains("::ffff:10.1.1.1"))
        #expect(!proxies.contains("11.0.0.1") && !proxies.contains("192.0.2.8") && !proxies.contains("2001:db8:2::1") && !proxies.contains("nonsense"))
        #expect(throws: TrustedProxiesError.self) { try TrustedProxies(["10.0.0.0/33"]) }
        #expect(throws: TrustedProxiesError.self) { try TrustedProxies(["10.0.0.0", "proxy.example"]) }
    }

    @Test("the client: the peer unless it is a trusted proxy; then the right-most untrusted forwarded-for entry; a chain with junk is not believed")
    func client() throws {
        let proxies = try TrustedProxies(["10.0.0.0/8"])
        #expect(proxies.client(peer: "198.51.100.1", forwardedFor: ["203.0.113.5"]) == "198.51.100.1", "not from a proxy: its own claim")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["1.2.3.4, 203.0.113.5"]) == "203.0.113.5")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["1.2.3.4, 203.0.113.5, 10.0.0.3"]) == "203.0.113.5", "through two proxies")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["1.2.3.4", "203.0.113.5"]) == "203.0.113.5", "the header repeated")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: []) == "10.0.0.2")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["1.2.3.4, not-an-address"]) == "10.0.0.2")
        #expect(proxies.client(peer: nil, forwardedFor: ["1.2.3.4"]) == nil)
        // Entries with ports or brackets, as some proxies write them.
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["203.0.113.5:4711"]) == "203.0.113.5")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["[2001:db8::1]:443"]) == "2001:db8::1")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["[2001:db8::7]"]) == "2001:db8::7")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["2001:db8::9"]) == "2001:db8::9")
    }
}

@Suite("analytics-ingest's answers")
struct TapResultWritingTests {
    @Test("a tap's answer is written by its own writer as the encoder writes it, every field present or absent")
    func sameBytesAsTheEncoder() throws {
        let texts: [String?] = [nil, "", "3f9a0c", "the \"same\" tap\nwas\\already/accepted", "é漢字😀\u{1}"]
        for verdict in [TapResult.Verdict.accepted, .duplicate, .rejected, .unavailable] {
            for _ in 0..<200 {
                let result = TapResult(
                    verdict: verdict, clickId: texts.randomElement()!, error: texts.randomElement()!, field: texts.randomElement()!,
                    reason: texts.randomElement()!)
                #expect(try IsletJSON.encode(result) == (try IsletJSON.encodeWithEncoder(result)), "\(result)")
            }
        }
    }
}
