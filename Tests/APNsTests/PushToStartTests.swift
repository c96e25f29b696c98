import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import APNsDispatcher
import NIOCore

/// A push-to-start must never start two activities: it is announced before it is sent, and one
/// whose answer is unknown is not sent again.
@Suite("Push-to-start is sent at most once", .timeLimit(.minutes(1)))
struct PushToStartTests {
    @Test("the start is announced (sending, acknowledged) before it is sent, then gets its final outcome")
    func announced() throws {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        let request = h.pushToStart(key: key)
        h.submit(request)
        h.outcomes(1)
        let outcomes = h.sink.all
        #expect(outcomes.map(\.result) == [.sending, .delivered])
        #expect(outcomes.allSatisfy { $0.requestId == request.requestId && $0.pushToStartKey == key })
        #expect(h.sender.sent.count == 1)
    }

    @Test("a start on an activity's broadcast channel (iOS 18) goes to the push-to-start token, its body unchanged; its announcement and its outcome name the channel")
    func onAChannel() throws {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        var request = h.pushToStart(key: key)
        request.channelId = "dHN0LXNyY2gtY2hubA=="
        request.payload = #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"DeliveryAttributes","attributes":{},"alert":{"title":"x"},"input-push-channel":"dHN0LXNyY2gtY2hubA=="}}"#
        try request.validate()
        h.submit(request)
        h.outcomes(1)
        #expect(h.sink.all.map(\.result) == [.sending, .delivered])
        #expect(h.sink.all.allSatisfy { $0.channelId == request.channelId && $0.pushToStartKey == key && $0.activityId == nil })
        #expect(h.sender.sent.map(\.deviceToken) == [hexToken(7)])
        #expect(h.sender.sent.first.map { String(buffer: $0.payload) }?.contains(#""input-push-channel":"dHN0LXNyY2gtY2hubA==""#) == true)
    }

    @Test("a timeout or a lost connection ends it as failed, without a second send; an update is still retried")
    func ambiguousNotResent() throws {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        h.sender.fail(hexToken(7), [APNsTransportError(.timeout, "no answer within 10 s")])
        h.submit(h.pushToStart(key: key))
        let outcomes = h.outcomes(1)
        #expect(h.sink.all.map(\.result) == [.sending, .failed])
        #expect(outcomes.last?.result == .failed)
        #expect(outcomes.last?.detail?.contains("never start two activities") == true)
        #expect(h.sender.sent.count == 1)

        h.register("a", token: hexToken(8))
        h.sender.fail(hexToken(8), [APNsTransportError(.lost, "connection closed")])
        h.submit(h.request("a", sequence: 1))
        h.until { h.sink.final.count == 2 }
        #expect(h.sink.final.last?.result == .delivered, "an update whose answer is unknown is sent again")
        #expect(h.sender.sent.filter { $0.deviceToken == hexToken(8) }.count == 2)
    }

    @Test("a start that stalled before it was completely written is sent again, alert and all: APNs cannot have processed it")
    func stalledResent() throws {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        var request = h.pushToStart(key: key)
        request.alerting = true
        h.sender.fail(hexToken(7), [APNsTransportError(.stalled, "not completely written by the deadline")])
        h.submit(request)
        h.until { h.sink.final.count == 1 }
        // The stalled attempt certainly did not reach the phone: `retrying` says so to the next
        // owner (persisted before the retry), and the second attempt is announced again.
        #expect(h.sink.all.map(\.result) == [.sending, .retrying, .sending, .delivered])
        #expect(h.sink.final.first?.attempts == 2)
        let sent = h.sender.sent.map { String(buffer: $0.payload) }
        #expect(sent.count == 2)
        #expect(Set(sent).count == 1, "sent again unchanged")
        #expect(sent.first?.contains("alert") == true)
    }

    @Test("announced before a crash without a final outcome: failed at once, not sent again")
    func unansweredAfterRestart() throws {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        let request = h.pushToStart(key: key)
        h.alreadyFinished([], maybeDelivered: [request.requestId])
        h.submit(request)
        let outcomes = h.outcomes(1)
        #expect(outcomes.map(\.result) == [.failed])
        #expect(h.sender.sent.isEmpty)
    }
}

extension EngineHarness {
    /// A device's push-to-start token for DeliveryAttributes, in the token table: its key.
    func registerPushToStart(token: String) -> String {
        let now = clock.date
        let record = TokenRecord(
            kind: .pushToStart, deviceId: "device-1", userId: "u", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now)
        tokens.put(record, key: record.key!)
        return record.key!
    }

    /// A push-to-start of activity order-1 to the device's token `key`.
    func pushToStart(key: String, sequence: Int64 = 1) -> PushRequest {
        var request = self.request("unused", .start, sequence: sequence)
        request.activityId = nil
        request.pushToStartKey = key
        request.sourceActivityId = "order-1"
        return request
    }
}
