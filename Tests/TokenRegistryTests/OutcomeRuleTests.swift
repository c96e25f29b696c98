import Foundation
import IsletMessages
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
