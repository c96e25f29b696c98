import Foundation
import IsletMessages
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
