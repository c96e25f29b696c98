import Foundation
import IsletMessages
import Prometheus
import Testing
@testable import AnalyticsConsumer
@testable import AnalyticsIngest

@Suite("analytics-ingest's bounded state")
struct StateTests {
    @Test("recent taps: first, in flight until settled, duplicate once acknowledged, forgotten when not")
    func recentTapsStates() {
        let recent = RecentTaps(capacity: 10)
        #expect(recent.claim("a") == .first)
        #expect(recent.claim("a") == .inFlight)
        recent.settle("a", acknowledged: true)
        #expect(recent.claim("a") == .duplicate)
        #expect(recent.claim("b") == .first)
        recent.settle("b", acknowledged: false)
        #expect(recent.claim("b") == .first, "a tap Kafka did not acknowledge is new again when retried")
    }

    @Test("recent taps keep the last `capacity` ids and forget the oldest, and a re-claimed id keeps its newer slot")
    func recentTapsBound() {
        let recent = RecentTaps(capacity: 3)
        for id in ["a", "b", "c"] {
            #expect(recent.claim(id) == .first)
            recent.settle(id, acknowledged: true)
        }
        #expect(recent.claim("d") == .first)  // evicts a
        recent.settle("d", acknowledged: true)
        #expect(recent.count == 3)
        #expect(recent.claim("a") == .first)  // evicts b
        recent.settle("a", acknowledged: true)
        #expect(recent.claim("c") == .duplicate)
        #expect(recent.claim("b") == .first)  // evicts c
        recent.settle("b", acknowledged: false)  // b forgotten; its slot is stale
        #expect(recent.claim("e") == .first)  // evicts d
        #expect(recent.claim("a") == .duplicate)
        #expect(recent.count <= 3)
        for index in 0..<1_000 { _ = recent.claim("x\(index)") }
        #expect(recent.count == 3)
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

    @Test("click ids are deterministic in the URL and the tap time (to the millisecond)")
    func clickIds() {
        let url = TestLinks.url()
        let time = TestLinks.issued.addingTimeInterval(1.2345)
        #expect(TapVerifier.clickId(url: url, tappedAt: time) == TapVerifier.clickId(url: url, tappedAt: time.addingTimeInterval(0.0004)))
        #expect(TapVerifier.clickId(url: url, tappedAt: time) != TapVerifier.clickId(url: url, tappedAt: time.addingTimeInterval(0.001)))
        #expect(TapVerifier.clickId(url: url, tappedAt: time) != TapVerifier.clickId(url: url + "&x=1", tappedAt: time))
    }
}

@Suite("analytics-consumer's statistics")
struct ClickStatsTests {
    static func click(_ id: String, activity: String, type: String = "DeliveryAttributes", surface: Surface = .lockScreen, element: String = "eta")
        -> ClickEvent
    {
        ClickEvent(
            clickId: id, activityId: activity, attributesType: type, surface: surface, element: element, contentSequence: 1, appVersion: "5",
            osVersion: "18", keyId: "k1", issuedAt: TestLinks.issued, tappedAt: TestLinks.issued, receivedAt: TestLinks.now)
    }

    static func delivered(_ id: String, activity: String?, result: PushResult = .delivered) -> PushOutcome {
        PushOutcome(requestId: id, activityId: activity, result: result, attempts: 1, completedAt: TestLinks.now)
    }

    @Test("taps per cell, delivered updates per type in either order, repeats counted once, other outcomes ignored")
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
        let text = stats.render()
        #expect(text.contains("RideAttributes"))
        #expect(text.contains("0.500"))
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
        #expect(text.contains(#"islet_analytics_consumer_taps_total{attributes_type="DeliveryAttributes",surface="lockScreen",element="eta"} 1"#))
        #expect(text.contains(#"islet_analytics_consumer_delivered_updates{attributes_type="DeliveryAttributes"} 2"#))
        #expect(text.contains(#"islet_analytics_consumer_taps_per_delivered_update{attributes_type="DeliveryAttributes",surface="lockScreen",element="eta"} 0.5"#))
        #expect(text.contains("islet_analytics_consumer_duplicate_clicks_total 1"))
    }
}
