import Foundation
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import IsletMessages
import TokenRegistry
import Testing
@testable import APNsDispatcher

@Suite("APNs answers read from their bodies")
struct AnswerTests {
    @Test("a 410's reason and timestamp (milliseconds since 1970); a 400's reason")
    func reasonAndTimestamp() {
        let gone = APNsAnswer(status: 410, apnsID: "id", body: Array(#"{"reason":"Unregistered","timestamp":1795000000123}"#.utf8))
        #expect(gone == APNsAnswer(status: 410, reason: "Unregistered", timestamp: Date(timeIntervalSince1970: 1_795_000_000.123), apnsID: "id"))
        let bad = APNsAnswer(status: 400, apnsID: nil, body: Array(#"{"reason":"BadDeviceToken"}"#.utf8))
        #expect(bad == APNsAnswer(status: 400, reason: "BadDeviceToken"))
    }

    @Test("a body that is not APNs's JSON leaves reason and timestamp out; a 200 has neither", arguments: [
        (400, "<html>Bad Request</html>"), (410, #"{"reason":"Unregistered","timestamp":"1795000000000"}"#), (200, #"{"reason":"Unregistered"}"#),
    ])
    func unreadableBody(status: Int, body: String) {
        #expect(APNsAnswer(status: status, apnsID: nil, body: Array(body.utf8)) == APNsAnswer(status: status))
    }

    @Test("apns-unique-id is kept in the outcome when it is a plain id; anything else (a header a proxy stuffed, 65 characters, a quote) is left out", arguments: [
        ("7b5e9c1a-30d4-4f2e-9a61-5c8b0d2e7f43", true), ("ABC-123", true), (String(repeating: "a", count: 64), true),
        (String(repeating: "a", count: 65), false), ("", false), ("a\"b", false), ("a b", false), ("é", false), ("x\u{0}", false),
    ])
    func uniqueID(header: String, kept: Bool) throws {
        let answer = APNsAnswer(status: 200, apnsID: "id", uniqueID: header, body: [])
        #expect(answer.uniqueID == (kept ? header : nil))
        let outcome = PushOutcome(
            requestId: "7f1c6b1e-2d4a-4c8e-9a51-0c3f5e6d7b8a", activityId: "order-42", result: .delivered, apns: answer.response, attempts: 1,
            completedAt: Date(timeIntervalSince1970: 1_795_000_000))
        #expect(outcome.apns?.uniqueId == (kept ? header : nil))
        #expect(try IsletJSON.decode(PushOutcome.self, from: try IsletJSON.encode(outcome)) == outcome)
    }

    @Test(
        "a timestamp no outcome can carry is left out and the reason kept, and the outcome reads back (the answer fuzzer found one outcome refused by every reader; Int64.max stopped the dispatcher)",
        arguments: [-59_499_999_999_999_999, Int64.max, Int64.min, 253_402_300_800_000])
    func timestampOutOfRange(milliseconds: Int64) throws {
        let answer = APNsAnswer(status: 410, apnsID: nil, body: Array(#"{"reason":"Unregistered","timestamp":\#(milliseconds)}"#.utf8))
        #expect(answer.reason == "Unregistered" && answer.timestamp == nil)
        let outcome = PushOutcome(
            requestId: "7f1c6b1e-2d4a-4c8e-9a51-0c3f5e6d7b8a", activityId: "order-42", result: .tokenInvalid, apns: answer.response, attempts: 1,
            completedAt: Date(timeIntervalSince1970: 1_795_000_000))
        #expect(try IsletJSON.decode(PushOutcome.self, from: try IsletJSON.encode(outcome)) == outcome)
    }
}

@Suite("One answer table for the dispatcher and the registry")
struct AnswerTableTests {
    static let statuses = [200, 400, 403, 404, 405, 410, 413, 429, 500, 503]
    static let reasons: [String?] = [
        nil, "Unregistered", "ExpiredToken", "BadDeviceToken", "DeviceTokenNotForTopic", "BadTopic", "TooManyRequests", "SomethingNew",
    ]

    @Test("an answer the dispatcher treats as a dead token is one the registry invalidates the token for, and no other")
    func sameVerdict() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        let token = String(repeating: "ab", count: 32)
        let record = TokenRecord(
            kind: .update, activityId: "order-1", userId: "u", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now)
        for status in Self.statuses {
            for reason in Self.reasons {
                let dispatcher = APNsAction.forAnswer(status: status, reason: reason) == .tokenInvalid
                let outcome = PushOutcome(
                    requestId: "r", activityId: "order-1", result: .tokenInvalid,
                    apns: .init(status: status, reason: reason, timestamp: now.addingTimeInterval(60)), attempts: 1,
                    tokenFingerprint: TokenFingerprint.of(token: token), completedAt: now.addingTimeInterval(60), bundleId: "com.example.food")
                let registry: Bool
                if case .invalidate = Registry.decide(outcome, current: record) { registry = true } else { registry = false }
                #expect(dispatcher == registry, "\(status) \(reason ?? "-"): dispatcher \(dispatcher), registry \(registry)")
            }
        }
        // A broadcast's channel that is not there is not a dead token.
        #expect(APNsAction.forAnswer(status: 400, reason: "ChannelNotRegistered") == .channelInvalid)
        #expect(APNsAction.forAnswer(status: 400, reason: "BadChannelId") == .channelInvalid)
        #expect(InvalidationReason(apnsStatus: 400, reason: "ChannelNotRegistered") == nil)
        #expect(APNsAction.forAnswer(status: 400, reason: "MissingChannelId") == .rejected)
        // Every 410 is a dead token, whatever its reason (APNs may add reasons).
        #expect(APNsAction.forAnswer(status: 410, reason: "SomethingNew") == .tokenInvalid)
        #expect(InvalidationReason(apnsStatus: 410, reason: "SomethingNew") == .apnsUnregistered)
        #expect(InvalidationReason(apnsStatus: 410, reason: "ExpiredToken") == .apnsExpiredToken)
    }
}
