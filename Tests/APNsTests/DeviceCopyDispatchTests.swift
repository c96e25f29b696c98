import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import APNsDispatcher

/// Issue 60 item 4: an activity's copies for its other devices are dispatched under each device's key.
@Suite("An activity on several devices: the dispatcher", .timeLimit(.minutes(1)))
struct DeviceCopyDispatchTests {
    func registerDevice(_ h: EngineHarness, _ activity: String, device: String, token: String) -> String {
        let key = MessageKey.device(bundleId: "com.example.food", activityId: activity, deviceId: device)
        h.tokens.put(
            TokenRecord(
                kind: .update, activityId: activity, deviceId: device, userId: "u", token: token,
                app: AppTarget(bundleId: "com.example.food", environment: .production), attributesType: "DeliveryAttributes",
                frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, activityStartedAt: h.clock.date, registeredAt: h.clock.date,
                updatedAt: h.clock.date, deviceKeyed: true),
            key: key)
        return key
    }

    func copy(_ request: PushRequest, device: String) -> PushRequest {
        var copy = request
        copy.requestId = UUID().uuidString.lowercased()
        copy.deviceId = device
        return copy
    }

    @Test("a copy goes to its device's token, with a budget of its own; APNs's 410 for the device ends the copy alone, and its outcome names the device; the activity's own token keeps receiving")
    func perDevice() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let pad = registerDevice(h, "a", device: "ipad", token: hexToken(2))
        // 12 priority-10 updates an hour per activity: each device's budget is its own.
        for i in 1...12 {
            let own = h.request("a", sequence: Int64(i), supersedable: false)
            h.submit(own)
            h.submit(copy(own, device: "ipad"))
            h.outcomes(2 * i)
        }
        #expect(h.sink.final.allSatisfy { $0.result == .delivered && $0.priorityUsed == 10 })
        #expect(h.sender.sent.filter { $0.deviceToken == hexToken(1) }.count == 12)
        #expect(h.sender.sent.filter { $0.deviceToken == hexToken(2) }.count == 12)
        #expect(h.sink.final.filter { $0.deviceId == "ipad" }.allSatisfy { $0.key == pad })

        h.sender.script(hexToken(2), [APNsAnswer(status: 410, reason: "Unregistered", timestamp: h.clock.date)])
        let own = h.request("a", sequence: 13, supersedable: false)
        h.submit(own)
        h.submit(copy(own, device: "ipad"))
        let outcomes = h.outcomes(26).suffix(2)
        let dead = try #require(outcomes.first { $0.deviceId == "ipad" })
        #expect(dead.result == .tokenInvalid && dead.key == pad)
        #expect(outcomes.first { $0.deviceId == nil }?.result == .deliveredDowngraded, "the phone's 13th update is past its own budget")
        // The next update: the phone's token is sent to, the iPad's dead one never again.
        let next = h.request("a", sequence: 14, supersedable: false)
        h.submit(next)
        h.submit(copy(next, device: "ipad"))
        h.advance(3)
        #expect(h.outcomes(28).suffix(2).map(\.result).sorted { $0.rawValue < $1.rawValue } == [.deliveredDowngraded, .tokenInvalid])
        #expect(h.sender.sent.filter { $0.deviceToken == hexToken(2) }.count == 13)
    }
}
