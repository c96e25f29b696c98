import Foundation
import IsletMessages
import IsletTokens
import IsletTesting
import Testing
@testable import TokenRegistry

@Suite("Push outcomes: when APNs's answer invalidates a token")
struct OutcomeRuleTests {
    let registeredAt = Date(timeIntervalSince1970: 1_795_000_000)
    let token = hexToken(7)

    var current: TokenRecord {
        TokenRecord(
            kind: .update, activityId: "a", userId: "u", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: registeredAt,
            updatedAt: registeredAt)
    }

    func outcome(status: Int, reason: String?, timestamp: Date?, result: PushResult = .tokenInvalid, fingerprint: String? = nil) -> PushOutcome {
        PushOutcome(
            requestId: "r", activityId: "a", result: result, apns: .init(status: status, reason: reason, timestamp: timestamp), attempts: 1,
            tokenFingerprint: fingerprint ?? TokenFingerprint.of(token: token), completedAt: registeredAt.addingTimeInterval(30))
    }

    @Test("each dead-token answer maps to its reason", arguments: [
        (410, "Unregistered", InvalidationReason.apnsUnregistered), (410, "ExpiredToken", .apnsExpiredToken),
        (400, "BadDeviceToken", .apnsBadDeviceToken), (400, "DeviceTokenNotForTopic", .apnsDeviceTokenNotForTopic),
    ])
    func deadTokenAnswers(status: Int, reason: String, expected: InvalidationReason) {
        let timestamp = status == 410 ? registeredAt.addingTimeInterval(20) : nil
        #expect(Registry.decide(outcome(status: status, reason: reason, timestamp: timestamp), current: current) == .invalidate(expected, since: timestamp))
    }

    @Test("a 410 older than the token's registration does not kill a token registered again after it")
    func olderTimestamp() {
        let decision = Registry.decide(outcome(status: 410, reason: "Unregistered", timestamp: registeredAt.addingTimeInterval(-1)), current: current)
        #expect(decision == .ignore("the token was registered again after APNs's verdict"))
    }

    @Test("answers that do not mean a dead token, and outcomes about another token, change nothing")
    func ignored() {
        #expect(Registry.decide(outcome(status: 400, reason: "BadTopic", timestamp: nil), current: current) != .invalidate(.apnsBadDeviceToken, since: nil))
        if case .invalidate = Registry.decide(outcome(status: 429, reason: "TooManyRequests", timestamp: nil), current: current) { Issue.record("429 invalidated") }
        if case .invalidate = Registry.decide(outcome(status: 200, reason: nil, timestamp: nil, result: .delivered), current: current) { Issue.record("200 invalidated") }
        let other = outcome(status: 410, reason: "Unregistered", timestamp: registeredAt.addingTimeInterval(60), fingerprint: TokenFingerprint.of(token: hexToken(8)))
        #expect(Registry.decide(other, current: current) == .ignore("the outcome concerns an earlier token of this key"))
        #expect(Registry.decide(outcome(status: 410, reason: "Unregistered", timestamp: registeredAt), current: nil) == .ignore("unknown key"))
        var invalidated = current
        invalidated.state = .invalidated
        invalidated.invalidation = .init(reason: .clientEnded, invalidatedAt: registeredAt)
        if case .invalidate = Registry.decide(outcome(status: 410, reason: "Unregistered", timestamp: registeredAt.addingTimeInterval(5)), current: invalidated) {
            Issue.record("an invalidated token was invalidated again")
        }
    }
}

/// Issue 61 item 2: content-service's `startUnconfirmed` (a push-to-start APNs accepted, and no
/// update token came in time) invalidates the push-to-start token it went to, until the app
/// registers it again.
@Suite("Push outcomes: a start never confirmed retires its push-to-start token")
struct StartUnconfirmedTests {
    let clock = ManualClock()
    let publisher = RecordingPublisher()
    static let key = MessageKey.pushToStart(bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes")

    func makeRegistry() -> Registry {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        return registry
    }

    func register(_ registry: Registry, token: Int, device: String = "d1") async throws {
        let body = RegisterPushToStartTokenRequest(token: hexToken(token), environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0")
        _ = try await registry.registerPushToStartToken(user: "u", bundleId: "com.example.food", deviceId: device, attributesType: "DeliveryAttributes", body)
    }

    func unconfirmed(token: Int?, at date: Date, key: String? = Self.key, activity: String? = "order-7") -> PushOutcome {
        PushOutcome(
            requestId: "r", pushToStartKey: key, result: .startUnconfirmed, attempts: 1, tokenFingerprint: token.map { TokenFingerprint.of(token: hexToken($0)) },
            completedAt: date, bundleId: "com.example.food", attributesType: "DeliveryAttributes", startActivityId: key == nil ? nil : activity)
    }

    func registerActivity(_ registry: Registry, device: String?, token: Int, activity: String = "order-7") async throws {
        var request = activityRequest(token: hexToken(token))
        request.deviceId = device
        _ = try await registry.registerActivityToken(user: "u", activityId: activity, request)
    }

    @Test("the registry holds the update token of the activity the start was to start (content-service's table had not read it): the push-to-start token stands; another user's record of that id confirms nothing")
    func activityTokenCameFirst() async throws {
        let registry = makeRegistry()
        try await register(registry, token: 1)
        var squatter = activityRequest(token: hexToken(9))
        squatter.deviceId = "d9"
        _ = try await registry.registerActivityToken(user: "mallory", activityId: "order-6", squatter)
        clock.advance(61)
        #expect(try await registry.handle(unconfirmed(token: 1, at: clock.date, activity: "order-6")) == .invalidate(.startUnconfirmed, since: nil))
        try await register(registry, token: 1)
        try await registerActivity(registry, device: nil, token: 5)
        clock.advance(61)
        #expect(try await registry.handle(unconfirmed(token: 1, at: clock.date)) == .ignore("the activity's update token came: the start is confirmed"))
        #expect(try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes").state == .active)
    }

    @Test("the start reached the phone after all (offline past the confirmation time): the device's update token for an activity of that type makes its push-to-start token active again; the old verdict read again does not retire it")
    func revivedByTheDevice() async throws {
        let registry = makeRegistry()
        try await register(registry, token: 1)
        clock.advance(61)
        let verdict = unconfirmed(token: 1, at: clock.date, activity: "order-8")
        #expect(try await registry.handle(verdict) == .invalidate(.startUnconfirmed, since: nil))
        #expect(publisher.records.last?.invalidation?.startActivityId == "order-8")
        // An activity the app started itself on the device proves nothing of the push-to-start token.
        clock.advance(60)
        try await registerActivity(registry, device: "d1", token: 7, activity: "order-99")
        #expect(try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes").state == .invalidated)
        clock.advance(60)
        try await registerActivity(registry, device: "d1", token: 5, activity: "order-8")
        let view = try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes")
        #expect(view.state == .active && view.registerAgain == nil)
        #expect(try await registry.handle(verdict) == .ignore("the activity's update token came: the start is confirmed"))
        var unnamed = verdict
        unnamed.startActivityId = nil
        #expect(try await registry.handle(unnamed) == .ignore("the push-to-start token was registered again after the start"))
        // Another device's update token revives nothing of this one's.
        let d2 = MessageKey.pushToStart(bundleId: "com.example.food", deviceId: "d2", attributesType: "DeliveryAttributes")
        try await register(registry, token: 2, device: "d2")
        clock.advance(61)
        #expect(try await registry.handle(unconfirmed(token: 2, at: clock.date, key: d2, activity: "order-9")) == .invalidate(.startUnconfirmed, since: nil))
        try await registerActivity(registry, device: "d3", token: 6, activity: "order-10")
        #expect(try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d2", attributesType: "DeliveryAttributes").state == .invalidated)
    }

    @Test("the token it went to is invalidated (startUnconfirmed); the app's lookup says to register again; registering it again revives it")
    func invalidatesUntilRegisteredAgain() async throws {
        let registry = makeRegistry()
        try await register(registry, token: 1)
        clock.advance(61)
        #expect(try await registry.handle(unconfirmed(token: 1, at: clock.date)) == .invalidate(.startUnconfirmed, since: nil))
        let written = try #require(publisher.records.last)
        #expect(written.state == .invalidated && written.invalidation?.reason == .startUnconfirmed && written.kind == .pushToStart)
        let view = try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes")
        #expect(view.registerAgain == true && view.state == .invalidated)
        // Read again (a second instance's copy, a restart): nothing more.
        let count = publisher.records.count
        #expect(try await registry.handle(unconfirmed(token: 1, at: clock.date)) == .ignore("token already invalidated"))
        #expect(publisher.records.count == count)
        clock.advance(5)
        try await register(registry, token: 1)
        let again = try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes")
        #expect(again.state == .active && again.registerAgain == nil)
    }

    @Test("a token the app registered after the verdict was written (a new one, or the same confirmed again) stands; so does an update token, or an outcome without a key")
    func registeredSinceStands() async throws {
        let registry = makeRegistry()
        try await register(registry, token: 1)
        let verdictTime = clock.date.addingTimeInterval(30)
        clock.advance(31)
        try await register(registry, token: 2)
        #expect(try await registry.handle(unconfirmed(token: 1, at: verdictTime)) == .ignore("the push-to-start token was registered again after the start"))
        clock.advance(5)
        try await register(registry, token: 2)
        #expect(try await registry.handle(unconfirmed(token: 2, at: verdictTime)) == .ignore("the push-to-start token was registered again after the start"))
        #expect(
            try registry.pushToStart(user: "u", bundleId: "com.example.food", deviceId: "d1", attributesType: "DeliveryAttributes").state == .active)
        let update = TokenRecord(
            kind: .update, activityId: "a", userId: "u", token: hexToken(3), app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: Date(timeIntervalSince1970: 0),
            updatedAt: Date(timeIntervalSince1970: 0))
        #expect(Registry.decide(unconfirmed(token: 3, at: clock.date), current: update) == .ignore("not a push-to-start token"))
        #expect(Registry.decide(unconfirmed(token: 3, at: clock.date, key: nil), current: update) == .ignore("startUnconfirmed without a push-to-start key"))
    }
}
