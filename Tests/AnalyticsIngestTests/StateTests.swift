import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import Prometheus
import Synchronization
import Testing
@testable import AnalyticsConsumer
@testable import AnalyticsIngest

@Suite("analytics-ingest's bounded state")
struct StateTests {
    /// A claim of a tap whose link is its own (no window in play) at `second`.
    static func claim(_ recent: RecentTaps, _ id: String, at second: Double = 0) -> RecentTaps.Claim {
        recent.claim(id, link: "link-" + id, at: TestLinks.now.addingTimeInterval(second))
    }

    @Test("recent taps: first, in flight until settled, duplicate once acknowledged, forgotten when not")
    func recentTapsStates() {
        let recent = RecentTaps(capacity: 10)
        #expect(Self.claim(recent, "a") == .first)
        #expect(Self.claim(recent, "a") == .inFlight)
        recent.settle("a", acknowledged: true)
        #expect(Self.claim(recent, "a") == .duplicate)
        #expect(Self.claim(recent, "b") == .first)
        recent.settle("b", acknowledged: false)
        #expect(Self.claim(recent, "b") == .first, "a tap Kafka did not acknowledge is new again when retried")
    }

    @Test("recent taps keep the last `capacity` ids and forget the oldest, and a re-claimed id keeps its newer slot")
    func recentTapsBound() {
        let recent = RecentTaps(capacity: 3)
        for id in ["a", "b", "c"] {
            #expect(Self.claim(recent, id) == .first)
            recent.settle(id, acknowledged: true)
        }
        #expect(Self.claim(recent, "d") == .first)  // evicts a
        recent.settle("d", acknowledged: true)
        #expect(recent.count == 3)
        #expect(Self.claim(recent, "a", at: 2) == .first)  // evicts b
        recent.settle("a", acknowledged: true)
        #expect(Self.claim(recent, "c") == .duplicate)
        #expect(Self.claim(recent, "b", at: 2) == .first)  // evicts c
        recent.settle("b", acknowledged: false)  // b forgotten; its slot is stale
        #expect(Self.claim(recent, "e") == .first)  // evicts d
        #expect(Self.claim(recent, "a") == .duplicate)
        #expect(recent.count <= 3)
        for index in 0..<1_000 { _ = Self.claim(recent, "x\(index)") }
        #expect(recent.count == 3)
    }

    @Test("one link counts once per second of the server's clock: another tap time within it is too soon, the next second counts; a tap Kafka refused does not hold the window")
    func linkWindow() {
        let recent = RecentTaps(capacity: 10)
        let at = { (second: Double) in TestLinks.now.addingTimeInterval(second) }
        #expect(recent.claim("t1", link: "L", at: at(0)) == .first)
        recent.settle("t1", acknowledged: true)
        #expect(recent.claim("t2", link: "L", at: at(0.5)) == .tooSoon(of: "t1"), "a re-timed tap of the same link within the window")
        #expect(recent.claim("t1", link: "L", at: at(0.6)) == .duplicate)
        #expect(recent.claim("o1", link: "other", at: at(0.6)) == .first, "other links are not held")
        #expect(recent.claim("t3", link: "L", at: at(1.0)) == .first)
        recent.settle("t3", acknowledged: false)
        #expect(recent.claim("t4", link: "L", at: at(1.1)) == .first, "the refused tap released the window")
        // Bounded: a full table drops only links older than the window, never the recent ones.
        let small = RecentTaps(capacity: 2)
        #expect(small.claim("a", link: "A", at: at(0)) == .first)
        #expect(small.claim("b", link: "B", at: at(0.1)) == .first)
        #expect(small.claim("c", link: "C", at: at(0.2)) == .first)
        #expect(small.claim("d", link: "B", at: at(0.3)) == .tooSoon(of: "b"), "B is still remembered")
    }

    /// Says yes `count` times, then no.
    final class Allowance: Sendable {
        private let left: Mutex<Int>
        init(_ count: Int) { left = Mutex(count) }
        func take() -> Bool {
            left.withLock { left in
                defer { left -= 1 }
                return left > 0
            }
        }
    }

    @Test("rejected taps past the sample are answered the same and counted, not written")
    func rejectedSample() async {
        let publisher = RecordingPublisher()
        let registry = PrometheusCollectorRegistry()
        let allowance = Allowance(2)
        let ingestor = Ingestor(
            verifier: TapVerifier(keyring: TestLinks.keyring, maxTapAge: .seconds(86_400)), recent: RecentTaps(capacity: 10), publisher: publisher,
            metrics: IngestMetrics(factory: PrometheusMetricsFactory(registry: registry)), logger: quietLogger, clock: ManualClock(TestLinks.now),
            recordRejected: { allowance.take() })
        let forged = TestLinks.tap(TestLinks.url(key: TestLinks.stranger))
        let results = await ingestor.ingest(Array(repeating: forged, count: 5), clientId: "192.0.2.1")
        #expect(results.map(\.verdict) == Array(repeating: .rejected, count: 5))
        #expect(publisher.rejected.count == 2)
        #expect(registry.emitted.contains("islet_analytics_rejected_unrecorded_total 3"), "\(registry.emitted)")
    }

    @Test("rate limiter: token buckets per client on a manual clock, Retry-After rounded up, bounded clients")
    func rateLimiter() {
        let clock = ManualClock()
        let limiter = RateLimiter(ratePerSecond: 0.5, burst: 2, maxClients: 2, clock: clock)
        #expect(limiter.admit("a") == .allowed)
        #expect(limiter.admit("a") == .allowed)
        #expect(limiter.admit("a") == .limited(retryAfterSeconds: 2))
        clock.advance(by: .seconds(1))
        #expect(limiter.admit("a") == .limited(retryAfterSeconds: 1))
        clock.advance(by: .seconds(1))
        #expect(limiter.admit("a") == .allowed)
        #expect(limiter.admit("b") == .allowed)
        #expect(limiter.trackedClients == 2)
        // A third client while both are active: the limiter forgets rather than grows.
        #expect(limiter.admit("c") == .allowed)
        #expect(limiter.trackedClients <= 2)
        // A flood of new addresses does not reset a client being limited now.
        let flooded = RateLimiter(ratePerSecond: 0.1, burst: 1, maxClients: 100, clock: clock)
        #expect(flooded.admit("victim-of-its-own-flood") == .allowed)
        clock.advance(by: .milliseconds(10))
        for index in 0..<1_000 {
            _ = flooded.admit("new-\(index)")
            if index % 50 == 0 { #expect(flooded.admit("victim-of-its-own-flood") != .allowed, "still limited after \(index) new addresses") }
            clock.advance(by: .milliseconds(1))
        }
        #expect(flooded.trackedClients <= 100)
        let off = RateLimiter(ratePerSecond: 0, burst: 1, maxClients: 1, clock: clock)
        #expect((0..<100).allSatisfy { _ in off.admit("a") == .allowed })
    }

    @Test("a rejected tap keeps at most 64 bytes of each version, cut on a character boundary (found by the body fuzzer)")
    func rejectedVersionsCutToBytes() throws {
        let verifier = TapVerifier(keyring: TestLinks.keyring, maxTapAge: .seconds(86_400))
        // 40 characters of 2 bytes, and one character of 201 bytes (a letter and 100 combining accents).
        let tap = TestLinks.tap(appVersion: String(repeating: "é", count: 40), osVersion: "a" + String(repeating: "\u{301}", count: 100))
        guard case .invalid(let rejected, let field) = verifier.check(tap, receivedAt: TestLinks.now, clientId: nil) else {
            Issue.record("a version over 64 bytes must reject the tap")
            return
        }
        #expect(field == "appVersion")
        #expect(rejected.appVersion == String(repeating: "é", count: 32))
        #expect(rejected.osVersion == "")
    }

    @Test("click ids name the link, not its spelling: respelled links and tap times within one second are one click; another second or another link is another")
    func clickIds() throws {
        let url = TestLinks.url()
        let time = TestLinks.issued.addingTimeInterval(61.2345)
        func id(_ url: String, _ tappedAt: Date = time) -> String? {
            TapVerifier.clickId(url: url, tappedAt: tappedAt, keyring: TestLinks.keyring, receivedAt: TestLinks.now)
        }
        let original = try #require(id(url))
        // The respellings an attacker tried: each verifies, and each is the same click.
        let signature = String(url[url.range(of: "isl_sig=")!.upperBound...])
        let first = signature.unicodeScalars.first!
        let respelled = [
            url + "&",
            url.replacingOccurrences(of: "&isl_e=", with: "&&isl_e="),
            url.replacingOccurrences(of: "isl_k=k2", with: "isl_k=%6B2"),
            url.replacingOccurrences(of: "isl_sig=" + signature, with: "isl_sig=%\(String(first.value, radix: 16, uppercase: true))" + signature.dropFirst()),
            url.replacingOccurrences(of: "isl_sig=" + signature, with: "isl_sig=%\(String(first.value, radix: 16, uppercase: false))" + signature.dropFirst()),
            url.replacingOccurrences(of: "&isl_sig=" + signature, with: "").replacingOccurrences(of: "?tab=status", with: "?isl_sig=\(signature)&tab=status"),
        ]
        for spelling in respelled {
            #expect(id(spelling) == original, "\(spelling)")
        }
        #expect(id(url, time.addingTimeInterval(0.001)) == original)
        #expect(id(url, time.addingTimeInterval(0.7)) == original)
        #expect(id(url, time.addingTimeInterval(1)) != original)
        #expect(id(TestLinks.url(TestLinks.target(element: "courier"))) != original)
    }
}

@Suite("analytics-consumer's statistics")
struct ClickStatsTests {
    /// A click of app `app` (a bundle id; `nil`: a link that named no app).
    static func click(
        _ id: String, activity: String, type: String = "DeliveryAttributes", surface: Surface = .lockScreen, element: String = "eta",
        app: String? = "com.example.food"
    ) -> ClickEvent {
        ClickEvent(
            clickId: id, activityId: activity, attributesType: type, surface: surface, element: element, contentSequence: 1,
            app: app.map { AppTarget(bundleId: $0, environment: .production) }, appVersion: "5", osVersion: "18", keyId: "k1",
            issuedAt: TestLinks.issued, tappedAt: TestLinks.issued, receivedAt: TestLinks.now)
    }

    static func type(_ app: String, _ attributesType: String) -> ClickStats.AppType { ClickStats.AppType(app: app, attributesType: attributesType) }

    static func delivered(_ id: String, activity: String?, result: PushResult = .delivered) -> PushOutcome {
        PushOutcome(requestId: id, activityId: activity, result: result, attempts: 1, completedAt: TestLinks.now)
    }

    @Test("old outcomes (without their type): taps per cell, delivered updates per type in either order, repeats counted once, other outcomes ignored")
    func counts() {
        var stats = ClickStats()
        stats.record(Self.delivered("r1", activity: "a1"))  // before a1's type is known
        stats.record(Self.click("c1", activity: "a1"))
        stats.record(Self.click("c1", activity: "a1"))  // at-least-once repeat
        stats.record(Self.click("c2", activity: "a1", element: "courier"))
        stats.record(Self.delivered("r2", activity: "a1"))
        stats.record(Self.delivered("r2", activity: "a1"))  // repeat
        stats.record(Self.delivered("r3", activity: "a1", result: .deliveredDowngraded))
        stats.record(Self.delivered("r4", activity: "a1", result: .tokenInvalid))
        stats.record(Self.delivered("r5", activity: nil))
        stats.record(Self.delivered("r6", activity: "a9"))  // never tapped
        stats.record(Self.click("c3", activity: "a2", type: "RideAttributes", surface: .minimal, element: "widget"))
        stats.record(Self.delivered("r7", activity: "a2"))
        stats.record(Self.delivered("r8", activity: "a2"))

        let rows = stats.rows
        #expect(rows.map(\.cell.element) == ["courier", "eta", "widget"])
        #expect(rows.map(\.taps) == [1, 1, 1])
        #expect(rows.map(\.deliveredUpdates) == [3, 3, 2])
        #expect(rows[2].tapsPerDeliveredUpdate == 0.5)
        #expect(stats.duplicateClicks == 1)
        #expect(stats.deliveredTotal == 6)
        #expect(stats.unattributedDelivered == 1)
        #expect(rows.allSatisfy { $0.cell.app == "com.example.food" })
        let text = stats.render()
        #expect(text.contains("RideAttributes"))
        #expect(text.contains("0.500"))
    }

    @Test("two apps with the same attributes type and activity ids count apart: each cell divides by its own app's deliveries; clicks and outcomes naming no app count under unknown")
    func perApp() throws {
        var stats = ClickStats()
        func delivered(_ id: String, activity: String, app: String?) -> PushOutcome {
            PushOutcome(
                requestId: id, activityId: activity, result: .delivered, attempts: 1, completedAt: TestLinks.now, bundleId: app,
                attributesType: "DeliveryAttributes")
        }
        // The same activity id in two apps (ids are the backends' own).
        stats.record(Self.click("c1", activity: "order-42", surface: .lockScreen, element: "status", app: "com.example.food"))
        stats.record(Self.click("c2", activity: "order-42", surface: .lockScreen, element: "status", app: "com.example.food"))
        stats.record(Self.click("c3", activity: "order-42", surface: .lockScreen, element: "status", app: "com.example.grocery"))
        stats.record(Self.click("c4", activity: "order-42", surface: .islandExpanded, element: "status", app: "com.example.grocery"))
        for index in 0..<4 { stats.record(delivered("f\(index)", activity: "order-42", app: "com.example.food")) }
        stats.record(delivered("g1", activity: "order-42", app: "com.example.grocery"))
        // An old link (no app) and an old outcome (no app): the unknown bucket, divided by its own deliveries.
        stats.record(Self.click("c5", activity: "order-7", app: nil))
        stats.record(delivered("u1", activity: "order-7", app: nil))
        stats.record(delivered("u2", activity: "order-7", app: nil))

        let rows = stats.rows
        #expect(rows.map(\.cell) == [
            ClickStats.Cell(app: "com.example.food", attributesType: "DeliveryAttributes", surface: "lockScreen", element: "status"),
            ClickStats.Cell(app: "com.example.grocery", attributesType: "DeliveryAttributes", surface: "islandExpanded", element: "status"),
            ClickStats.Cell(app: "com.example.grocery", attributesType: "DeliveryAttributes", surface: "lockScreen", element: "status"),
            ClickStats.Cell(app: ClickStats.unknownApp, attributesType: "DeliveryAttributes", surface: "lockScreen", element: "eta"),
        ])
        #expect(rows.map(\.taps) == [2, 1, 1, 1])
        #expect(rows.map(\.deliveredUpdates) == [4, 1, 1, 2])
        #expect(rows.map(\.tapsPerDeliveredUpdate) == [0.5, 1, 1, 0.5])
        let text = stats.render()
        #expect(text.hasPrefix("app "))
        #expect(text.contains("com.example.grocery") && text.contains("unknown"))
    }

    @Test("a widget push's delivered outcome (iOS 26, its kind in attributesType) is no Live Activity update: it counts nowhere")
    func widgetPushesDoNotCount() {
        var stats = ClickStats()
        let widget = PushOutcome(
            requestId: "w1", result: .delivered, attempts: 1, completedAt: TestLinks.now, bundleId: "com.example.food", attributesType: "OrderStatusWidget",
            widgetKey: MessageKey.widget(bundleId: "com.example.food", deviceId: "d1", kind: "OrderStatusWidget"))
        #expect(stats.record(widget) == nil)
        #expect(stats.deliveredTotal == 0)
    }

    @Test("an outcome naming its attributes type counts for that type, tapped or not, push-to-start included: every activity's deliveries are the denominator")
    func everyActivityCounts() {
        var stats = ClickStats()
        func delivered(_ id: String, activity: String?, type: String) -> PushOutcome {
            PushOutcome(
                requestId: id, activityId: activity, pushToStartKey: activity == nil ? "pts:com.example.food:d1:\(type)" : nil, result: .delivered,
                attempts: 1, completedAt: TestLinks.now, bundleId: "com.example.food", attributesType: type)
        }
        stats.record(Self.click("c1", activity: "a1"))
        stats.record(delivered("r1", activity: "a1", type: "DeliveryAttributes"))
        stats.record(delivered("r2", activity: "a2", type: "DeliveryAttributes"))  // never tapped
        stats.record(delivered("r3", activity: nil, type: "DeliveryAttributes"))  // a push-to-start
        stats.record(delivered("r3", activity: nil, type: "DeliveryAttributes"))  // repeat
        stats.record(delivered("r4", activity: "b1", type: "RideAttributes"))
        #expect(stats.delivered == [Self.type("com.example.food", "DeliveryAttributes"): 3, Self.type("com.example.food", "RideAttributes"): 1])
        #expect(stats.unattributedDelivered == 0)
        #expect(stats.rows.map(\.deliveredUpdates) == [3])
        #expect(stats.rows.first?.tapsPerDeliveredUpdate == 1.0 / 3.0)
    }

    @Test("bounded: at most `capacity` cells; clicks beyond are not counted and are reported")
    func bounded() {
        var stats = ClickStats(capacity: 2)
        for index in 0..<5 { stats.record(Self.click("c\(index)", activity: "a\(index)", element: "e\(index)")) }
        #expect(stats.rows.count == 2)
        #expect(stats.droppedCells == 3)
    }

    @Test("the store's metrics: taps counter per cell, gauges after a refresh")
    func metrics() {
        let registry = PrometheusCollectorRegistry()
        let store = StatsStore(factory: PrometheusMetricsFactory(registry: registry))
        store.record(Self.click("c1", activity: "a1"))
        store.record(Self.click("c1", activity: "a1"))
        store.record(Self.delivered("r1", activity: "a1"))
        store.record(Self.delivered("r2", activity: "a1"))
        store.refreshGauges()
        let text = registry.emitted
        #expect(text.contains(#"islet_analytics_consumer_taps_total{app="com.example.food",attributes_type="DeliveryAttributes",surface="lockScreen",element="eta"} 1"#))
        #expect(text.contains(#"islet_analytics_consumer_delivered_updates{app="com.example.food",attributes_type="DeliveryAttributes"} 2"#))
        #expect(
            text.contains(
                #"islet_analytics_consumer_taps_per_delivered_update{app="com.example.food",attributes_type="DeliveryAttributes",surface="lockScreen",element="eta"} 0.5"#))
        #expect(text.contains("islet_analytics_consumer_duplicate_clicks_total 1"))
    }
}

@Suite("analytics-consumer's loop, on the in-memory bus")
struct ClickConsumerTests {
    @Test("clicks and outcomes are counted and marked processed in order; a record that is neither goes to the dead-letter topic")
    func loop() async throws {
        let bus = MemoryBus()
        let (clicks, outcomes) = (IsletTopics.clicks.name, IsletTopics.pushOutcomes.name)
        try await bus.send(ClickStatsTests.click("c1", activity: "a1"), to: clicks)
        try await bus.send(ClickStatsTests.delivered("r1", activity: "a1"), to: outcomes)
        try await bus.send(topic: clicks, key: "a1", value: Array(#"{"clickId":3}"#.utf8), headers: [], partition: nil)
        let source = bus.source([clicks, outcomes])
        let store = StatsStore(factory: PrometheusMetricsFactory(registry: PrometheusCollectorRegistry()))
        let deadLetters = DeadLetterWriter(producer: bus, consumer: source, service: "analytics-consumer", logger: quietLogger)
        let assigned = Flag()
        let consumer = ClickConsumer(
            consumer: source, deadLetters: deadLetters, store: store, clicksTopic: clicks, logger: quietLogger, onAssigned: { assigned.set() })
        let running = Task { try await consumer.run() }
        while source.processed(clicks) != 1 || source.processed(outcomes) != 0 { await Task.yield() }
        source.shutdown()
        try await running.value

        #expect(assigned.isSet)
        #expect(store.snapshot.rows.map(\.taps) == [1])
        let letters = bus.records(IsletTopics.deadLetters.name)
        #expect(letters.count == 1)
        #expect(try IsletJSON.decode(DeadLetterRecord.self, from: letters[0].value ?? []).origin.topic == clicks)
    }
}

/// A flag tasks can share.
final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
