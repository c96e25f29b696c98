import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import NIOCore
import Testing
@testable import APNsDispatcher

/// Issue 61 item 1: WidgetKit pushes (iOS 26) go with their own push type and topic, at priority
/// 5, within a per-device budget of their own.
@Suite("Widget pushes are sent as APNs wants them", .timeLimit(.minutes(1)))
struct WidgetPushDispatchTests {
    @Test("a widget push goes to the widget token with apns-push-type widgets, topic <bundle>.push-type.widgets, priority 5 and its expiration; its outcome names the widget key")
    func sentAsWidgetPush() throws {
        let h = EngineHarness()
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        let request = h.widgetPush(key: key)
        h.submit(request)
        let outcome = try #require(h.outcomes(1).first)
        #expect(outcome.result == .delivered && outcome.widgetKey == key && outcome.activityId == nil && outcome.pushToStartKey == nil)
        #expect(outcome.key == key && outcome.apnsTimestamp == nil, "a widget push has no aps.timestamp")
        let push = try #require(h.sender.sent.first)
        #expect(push.pushType == "widgets" && push.priority == 5 && push.deviceToken == hexToken(9))
        #expect(push.destination == .device(token: hexToken(9), topic: "com.example.food.push-type.widgets"))
        #expect(push.bundleID == "com.example.food")
        #expect(push.expiration == Int64(request.expiration!.timeIntervalSince1970))
        #expect(String(buffer: push.payload) == PushRequest.widgetPayload, "sent unchanged: never restamped")
        #expect(throws: Never.self) { try outcome.validate() }
    }

    @Test("a device's widget pushes spend its widget budget, not the activity's or push-to-start's: over it, the next waits (within the widget wait), and a newer one for the device replaces it (each says only: reload)")
    func budgetedPerDevice() throws {
        var policy = DispatcherPolicy()
        policy.budgets.widgets = .init(capacity: 2, period: .seconds(3_600))
        policy.budgets.widgetMaximumWait = .seconds(3_600)
        let h = EngineHarness(policy: policy)
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        let other = h.registerWidget(device: "d2", token: hexToken(10))
        h.submit(h.widgetPush(key: key))
        h.submit(h.widgetPush(key: key))
        h.outcomes(2)
        let waiting = h.widgetPush(key: key)
        h.submit(waiting)
        #expect(h.sender.sent.count == 2, "the third waits for budget")
        h.submit(h.widgetPush(key: other))
        #expect(h.sender.sent.count == 3, "another device has its own budget")
        let newer = h.widgetPush(key: key)
        h.submit(newer)
        let coalesced = try #require(h.sink.final.first { $0.requestId == waiting.requestId })
        #expect(coalesced.result == .coalesced && coalesced.supersededBy == newer.requestId)
        // The activity's budget is untouched: its priority-10 updates go at 10.
        h.register("a", token: hexToken(11))
        h.submit(h.request("a", sequence: 1))
        #expect(h.sender.sent.last?.priority == 10)
        h.advance(1_801)
        #expect(h.sink.final.last?.requestId == newer.requestId && h.sink.final.last?.result == .delivered, "sent once budget came back")
    }

    @Test("a widget push whose device's budget does not come back within the widget wait (2 minutes) ends expired at once: it never holds its partition's offset for the ten minutes a send takes to refill")
    func overBudgetIsNotHeld() throws {
        var policy = DispatcherPolicy()
        policy.budgets.widgets = .init(capacity: 1, period: .seconds(3_600))
        let h = EngineHarness(policy: policy)
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        h.submit(h.widgetPush(key: key))
        let over = h.widgetPush(key: key)
        h.submit(over)
        let outcome = try #require(h.sink.final.first { $0.requestId == over.requestId })
        #expect(outcome.result == .expired && outcome.attempts == 0 && outcome.detail?.contains("widget budget") == true)
        #expect(h.sender.sent.count == 1)
        // With the budget back within the wait, it waits and goes.
        policy.budgets.widgets = .init(capacity: 60, period: .seconds(3_600))
        let quick = EngineHarness(policy: policy)
        let quickKey = quick.registerWidget(device: "d1", token: hexToken(9))
        for _ in 0..<61 { quick.submit(quick.widgetPush(key: quickKey)) }
        #expect(quick.sender.sent.count == 60)
        quick.advance(61)
        #expect(quick.sender.sent.count == 61 && quick.sink.final.allSatisfy { $0.result == .delivered })
    }

    @Test("a widget push's delivered outcome, read by the partition's next owner, sets no floor on the widget key: another order's widget push with a lower sequence still goes (it carries its activity's sequence, and activities share the key)")
    func noFloorFromWidgetOutcomes() throws {
        let h = EngineHarness()
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        var ids = RecentOutcomes.Ids()
        ids.add(
            PushOutcome(
                requestId: UUID().uuidString.lowercased(), result: .delivered, apns: .init(status: 200), priorityUsed: 5, attempts: 1,
                completedAt: h.clock.date, bundleId: "com.example.food", attributesType: "OrderStatusWidget", contentSequence: 8, widgetKey: key))
        #expect(ids.floors.isEmpty)
        ids.floors[key] = .init(sequence: 8, requestId: UUID().uuidString.lowercased())
        h.alreadyFinished(ids)
        h.submit(h.widgetPush(key: key))
        #expect(h.outcomes(1).first?.result == .delivered, "a floor on the key (as an older dispatcher wrote it) does not hold a widget push back")
    }

    @Test("waiting widget pushes to a device: the newest arrival replaces what waits, whatever its activity's sequence (several activities share the key)")
    func newestArrivalWins() throws {
        var queue = ActivityQueue()
        let h = EngineHarness()
        let key = MessageKey.widget(bundleId: "com.example.food", deviceId: "d1", kind: "OrderStatusWidget")
        var first = h.widgetPush(key: key)
        first.contentSequence = 9
        var second = h.widgetPush(key: key)
        second.contentSequence = 2
        #expect(queue.enqueue(QueuedRequest(request: first, ticket: 1, enqueuedAt: h.clock.date)).isEmpty)
        let replaced = queue.enqueue(QueuedRequest(request: second, ticket: 2, enqueuedAt: h.clock.date))
        #expect(replaced.map(\.request.request.requestId) == [first.requestId] && replaced.first?.by == second.requestId)
        #expect(queue.pending.map(\.request.requestId) == [second.requestId])
    }

    @Test("a widget token registered more than 8 hours ago still gets pushes: the Live Activity lifetime is not a widget's")
    func noActivityLifetime() throws {
        let h = EngineHarness()
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        h.advance(9 * 3_600)
        h.submit(h.widgetPush(key: key))
        #expect(h.outcomes(1).first?.result == .delivered)
    }

    @Test("APNs's 410 for a widget token is a token verdict on the widget key")
    func unregistered() throws {
        let h = EngineHarness()
        let key = h.registerWidget(device: "d1", token: hexToken(9))
        h.sender.script(hexToken(9), [APNsAnswer(status: 410, reason: "Unregistered", timestamp: Date(timeIntervalSince1970: 1_795_000_000))])
        h.submit(h.widgetPush(key: key))
        let outcome = try #require(h.outcomes(1).last)
        #expect(outcome.result == .tokenInvalid && outcome.widgetKey == key && outcome.tokenFingerprint == TokenFingerprint.of(token: hexToken(9)))
    }
}

extension EngineHarness {
    /// A device's widget token for OrderStatusWidget, in the token table: its key.
    func registerWidget(device: String, token: String) -> String {
        let now = clock.date
        let record = TokenRecord(
            kind: .widget, deviceId: device, userId: "u", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "OrderStatusWidget", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now)
        tokens.put(record, key: record.key!)
        return record.key!
    }

    /// A widget push to the widget token `key`, as content-service makes it.
    func widgetPush(key: String) -> PushRequest {
        PushRequest(
            requestId: UUID().uuidString.lowercased(), event: .update, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "OrderStatusWidget", payload: PushRequest.widgetPayload, priority: 5, urgency: .routine, supersedable: true, alerting: false,
            apnsTimestamp: 1_795_000_000, contentSequence: 1, expiration: clock.date.addingTimeInterval(36_000), createdAt: clock.date,
            sourceActivityId: "order-1", widgetKey: key)
    }
}
