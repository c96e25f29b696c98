import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Issue 61 item 1: an activity's events refresh its user's home-screen widgets (iOS 26 WidgetKit push).
@Suite("Widget pushes from an activity's events")
struct WidgetPushTests {
    static let kind = "OrderStatusWidget"

    static func widgetKey(_ deviceId: String, kind: String = kind) -> String {
        MessageKey.widget(bundleId: app.bundleId, deviceId: deviceId, kind: kind)
    }

    func widgetToken(_ deviceId: String, user: String = "ana", seed: String, kind: String = kind, state: TokenState = .active) -> TokenRecord {
        TokenRecord(
            kind: .widget, deviceId: deviceId, userId: user, token: String(repeating: seed, count: 32), app: app, attributesType: kind,
            frequentUpdatesEnabled: false, appVersion: "3.0", state: state,
            invalidation: state == .invalidated ? .init(reason: .apnsUnregistered, invalidatedAt: now) : nil, registeredAt: now, updatedAt: now)
    }

    /// Ana's activity order-42 (her phone d1), her widgets on d1 and d2, a stale one on d4, another
    /// kind on d5; Mallory's widget on d3.
    func tokens() -> PartitionTokens {
        let tokens = PartitionTokens.whole()
        tokens.put(
            TokenRecord(
                kind: .update, activityId: "order-42", deviceId: "d1", userId: "ana", token: String(repeating: "11", count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
                updatedAt: now),
            key: "com.example.food/order-42")
        tokens.put(widgetToken("d1", seed: "ab"), key: Self.widgetKey("d1"))
        tokens.put(widgetToken("d2", seed: "cd"), key: Self.widgetKey("d2"))
        tokens.put(widgetToken("d3", user: "mallory", seed: "ef"), key: Self.widgetKey("d3"))
        tokens.put(widgetToken("d4", seed: "fa", state: .invalidated), key: Self.widgetKey("d4"))
        tokens.put(widgetToken("d5", seed: "bc", kind: "OtherWidget"), key: Self.widgetKey("d5", kind: "OtherWidget"))
        return tokens
    }

    func update(_ sequence: Int64, _ status: String, kind: ActivityEventKind = .update) -> ActivityEvent {
        var update = event("DeliveryAttributes", kind, sequence: sequence, ["orderId": .string("42"), "status": .string(status), "courier": .object(["name": .string("Ana")])])
        update.bundleId = app.bundleId
        return update
    }

    func requests(_ engine: ContentEngine, _ event: ActivityEvent) throws -> [PushRequest] {
        guard case .send(let prepared) = try engine.prepare(event, partition: 0) else { return [] }
        engine.commit(prepared)
        return prepared.requests
    }

    @Test("entering a listed state refreshes each of the user's devices' widgets once, written before the activity's content (a writer stopped between the two leaves the event to be read again); the same state again, or an unlisted one, refreshes nothing; the end always does")
    func refreshOnStateChanges() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        let first = try requests(engine, update(1, "courier_assigned"))
        let widgets = first.filter(\.isWidget)
        #expect(widgets.map(\.widgetKey) == [Self.widgetKey("d1"), Self.widgetKey("d2")], "Ana's active widget tokens only: not Mallory's, not the stale one, not another kind")
        #expect(first.first?.isWidget == true && first.last?.isWidget == false, "before the activity's own content")
        let content = try #require(first.first { !$0.isWidget })
        for push in widgets {
            #expect(push.payload == #"{"aps":{"content-changed":true}}"# && push.priority == 5 && push.event == .update && !push.alerting)
            #expect(push.supersedable && push.expiration != nil && push.sourceActivityId == "order-42" && push.attributesType == Self.kind)
            let deviceId = push.widgetKey.flatMap(MessageKey.splitWidget)?.deviceId ?? ""
            #expect(push.requestId == RequestIds.widget(of: content.requestId, deviceId: deviceId))
            #expect(throws: Never.self) { try push.validate() }
            var bytes: [UInt8] = []
            push.writeJSON(into: &bytes)
            #expect(try IsletJSON.decode(PushRequest.self, from: bytes) == push, "the widget key survives the wire")
        }
        #expect(try requests(engine, update(2, "courier_assigned")).filter(\.isWidget).isEmpty, "the same state: nothing to reload")
        #expect(try requests(engine, update(3, "preparing")).filter(\.isWidget).isEmpty, "a state the template does not list")
        #expect(try requests(engine, update(4, "out_for_delivery")).filter(\.isWidget).count == 2)
        #expect(try requests(engine, update(5, "delivered", kind: .end)).filter(\.isWidget).count == 2, "the end")
    }

    @Test("the activity's memory follows its content, never a widget push; read back (a restart, a partition moved), a widget push changes nothing")
    func memoryIgnoresWidgets() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        let made = try requests(engine, update(1, "courier_assigned"))
        let content = try #require(made.first { !$0.isWidget })
        let widget = try #require(made.first { $0.isWidget })
        #expect(engine.memory(of: "com.example.food/order-42")?.latest?.requestId == content.requestId)
        // A widget push's outcome (an old outcome without its key would name no activity either;
        // one naming the activity's id and app would: the key decides).
        var outcome = PushOutcome(requestId: widget.requestId, result: .failed, attempts: 1, completedAt: now, bundleId: app.bundleId, widgetKey: widget.widgetKey)
        engine.record(outcome)
        outcome.activityId = "order-42"
        engine.record(outcome)
        #expect(engine.memory(of: "com.example.food/order-42")?.outcome(of: widget.requestId) == nil, "the widget push's outcome is not the activity's")
        let reader = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        reader.replay(widget, partition: 0)
        #expect(reader.memory(of: "com.example.food/order-42") == nil, "a widget push alone makes no memory of the activity")
        reader.replay(content, partition: 0)
        reader.replay(widget, partition: 0)
        #expect(reader.memory(of: "com.example.food/order-42")?.latest?.requestId == content.requestId)
    }

    @Test("the token table knows each user's widget devices by app, kind and user, following re-registrations, another user taking the key, and removals; a widget token names its device")
    func tableIndex() throws {
        let tokens = tokens()
        let owner = DeliveryToken.owner(of: "ana")
        #expect(tokens.widgetKeys(bundleId: app.bundleId, kind: Self.kind, owner: owner) == ["d1", "d2", "d4"].map { Self.widgetKey($0) })
        #expect(tokens.widgetKeys(bundleId: app.bundleId, kind: "OtherWidget", owner: owner) == [Self.widgetKey("d5", kind: "OtherWidget")])
        #expect(tokens.widgetKeys(bundleId: "com.example.ride", kind: Self.kind, owner: owner).isEmpty)
        #expect(tokens.token(forKey: Self.widgetKey("d2"))?.deviceId == "d2")
        #expect(tokens.token(forKey: Self.widgetKey("d2")) == DeliveryToken(widgetToken("d2", seed: "cd")))
        // Mallory registers d2's key (the registry refuses it; a record on the topic is what counts here).
        tokens.put(widgetToken("d2", user: "mallory", seed: "dd"), key: Self.widgetKey("d2"))
        #expect(tokens.widgetKeys(bundleId: app.bundleId, kind: Self.kind, owner: owner) == ["d1", "d4"].map { Self.widgetKey($0) })
        #expect(tokens.widgetKeys(bundleId: app.bundleId, kind: Self.kind, owner: DeliveryToken.owner(of: "mallory")) == ["d2", "d3"].map { Self.widgetKey($0) })
        tokens.remove(key: Self.widgetKey("d1"), partition: 0, offset: Int64.max)
        #expect(tokens.widgetKeys(bundleId: app.bundleId, kind: Self.kind, owner: owner) == [Self.widgetKey("d4")])
    }

    @Test("a template's widgets are checked at load: kinds named, states known, not with broadcast", arguments: [
        ("widgets: { kinds: [] }", "widgets.kinds"),
        ("widgets: { kinds: [\"a:b\"] }", "widgets.kinds[0]"),
        ("widgets: { kinds: [W], states: [nope] }", "widgets.states[0]"),
        ("widgets: { kinds: [W, W] }", "widgets.kinds"),
        ("app: { bundleId: com.example.x, environment: production }\nbroadcast: { storagePolicy: 0 }\nwidgets: { kinds: [W] }", "widgets"),
    ])
    func templateChecks(extra: String, path: String) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("islet-widgets-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let text = "attributesType: X\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {}}\n" + extra
        try text.write(to: directory.appendingPathComponent("x.yaml"), atomically: true, encoding: .utf8)
        #expect { try TemplateLoader.load(directory: directory.path) } throws: { ($0 as? TemplateError)?.path == path }
    }
}
