import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Issue 60 item 4: every request for an activity's own token gets a copy for each of its other
/// devices' active tokens.
@Suite("An activity on several devices: content-service's copies")
struct DeviceCopyTests {
    static let own = MessageKey.activity(bundleId: app.bundleId, activityId: "order-42")
    static let pad = MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "ipad")

    func token(_ deviceId: String, keyed: Bool, seed: String, locale: String? = nil, state: TokenState = .active, at date: Date = now) -> TokenRecord {
        TokenRecord(
            kind: .update, activityId: "order-42", deviceId: deviceId, userId: "ana", token: String(repeating: seed, count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: state,
            invalidation: state == .invalidated ? .init(reason: .userDismissed, invalidatedAt: date) : nil, registeredAt: date, updatedAt: date,
            locale: locale, deviceKeyed: keyed ? true : nil)
    }

    func status(_ sequence: Int64, _ status: String, _ kind: ActivityEventKind = .update) -> ActivityEvent {
        var update = event("DeliveryAttributes", kind, sequence: sequence, ["orderId": .string("42"), "status": .string(status)])
        update.bundleId = app.bundleId
        return update
    }

    func prepared(_ engine: ContentEngine, _ event: ActivityEvent) throws -> ContentEngine.Prepared {
        guard case .send(let prepared) = try engine.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "ignored") }
        engine.commit(prepared)
        return prepared
    }

    @Test("an update goes to the activity's own token and, as a copy, to each other device's: the device's key, a derived id, the same content rendered in the device's language; an invalidated device gets none")
    func copies() throws {
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab", locale: "en-US"), key: Self.own)
        tokens.put(token("ipad", keyed: true, seed: "cd", locale: "zh-Hans-CN"), key: Self.pad)
        let watch = MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "watch")
        tokens.put(token("watch", keyed: true, seed: "ef", state: .invalidated), key: watch)
        #expect(tokens.deviceKeys(ofActivity: Self.own) == [Self.pad, watch])
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: ManualClock(now))

        let requests = try prepared(engine, status(1, "placed", .start)).requests
        #expect(requests.map(\.key) == [Self.pad, Self.own], "the copy is written first")
        let (copy, mine) = (requests[0], requests[1])
        #expect(mine.deviceId == nil && copy.deviceId == "ipad")
        #expect(copy.requestId == RequestIds.copy(of: mine.requestId, deviceId: "ipad"))
        #expect(copy.contentSequence == mine.contentSequence && copy.apnsTimestamp == mine.apnsTimestamp && copy.event == mine.event)
        #expect(mine.payload.contains("Order received") && copy.payload.contains("订单已接收"))
        #expect(copy.tokenRegisteredAt == now)
        #expect(throws: Never.self) { try copy.validate() }
        var bytes: [UInt8] = []
        copy.writeJSON(into: &bytes)
        #expect(try IsletJSON.decode(PushRequest.self, from: bytes) == copy, "the copy's device survives the wire")
        #expect(try IsletJSON.decode(PushRequest.self, from: try IsletJSON.encode(copy)) == copy)

        // The memory is the activity's own request's: a copy read back, or its outcome, changes nothing.
        let before = engine.memory(of: Self.own)
        engine.replay(copy, partition: 0)
        engine.record(PushOutcome(
            requestId: copy.requestId, activityId: "order-42", result: .failed, attempts: 1, completedAt: now, bundleId: app.bundleId, deviceId: "ipad"))
        #expect(engine.memory(of: Self.own) == before)

        // The end reaches both; the invalidated watch never.
        let end = try prepared(engine, status(2, "delivered", .end)).requests
        #expect(end.allSatisfy { $0.event == .end || $0.event == .update })
        #expect(Set(end.compactMap(\.deviceId)) == ["ipad"])
        #expect(end.filter { $0.deviceId == nil }.count == end.filter { $0.deviceId == "ipad" }.count)
        #expect(!end.contains { $0.key == watch })
    }

    @Test("a device record holding the activity's own token (one phone under two device ids), or another user's device record, gets no copy")
    func oneTokenOneCopy() throws {
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        tokens.put(token("ipad", keyed: true, seed: "ab"), key: Self.pad)
        var squatter = token("mallory", keyed: true, seed: "ef")
        squatter.userId = "mallory"
        tokens.put(squatter, key: MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "mallory"))
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: ManualClock(now))
        #expect(try prepared(engine, status(1, "placed", .start)).requests.map(\.key) == [Self.own])
    }

    @Test("a device whose record is read after the latest content was made gets that content (without its alert) from the monitor's next pass; once the activity ended, its end when the activity started there before the end was made, nothing when after (a new activity of the id)")
    func lateDevice() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        // Read before the table was loaded (a restart): nothing is sent again.
        tokens.put(token("old", keyed: true, seed: "99"), key: MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "old"))
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        let first = try prepared(engine, status(1, "out_for_delivery", .start)).requests
        #expect(first.count == 2)
        engine.watchLateDevices()
        clock.advance(1)
        tokens.put(token("ipad", keyed: true, seed: "cd", at: clock.date), key: Self.pad)
        clock.advance(600)
        let items = engine.sweep()
        let copies = items.flatMap(\.requests).filter { $0.requestId == RequestIds.catchUp(of: first[1].requestId, deviceId: "ipad") }
        let copy = try #require(copies.first)
        #expect(copies.count == 1 && copy.key == Self.pad && copy.contentSequence == first[1].contentSequence && copy.event == .update)
        let alert = try aps(copy)["alert"]
        #expect(!copy.alerting && alert == nil)
        #expect(copy.apnsTimestamp == first[1].apnsTimestamp, "the content as it was")
        #expect(copy.createdAt == clock.date && (copy.expiration ?? .distantPast) > clock.date, "a fresh stale date and expiration: not expired before it is sent")
        #expect(!items.flatMap(\.requests).contains { $0.deviceId == "old" })
        for item in items { engine.commit(item) }
        #expect(!engine.sweep().flatMap(\.requests).contains { $0.deviceId == "ipad" }, "sent once")
        // The iPad's app confirms its token (the same one again): nothing is sent again.
        tokens.put(token("ipad", keyed: true, seed: "cd", at: clock.date), key: Self.pad)
        #expect(!engine.sweep().flatMap(\.requests).contains { $0.deviceId == "ipad" })

        // Ended before a second device's record is read: the end, when its activity started there before the end.
        clock.advance(1)
        _ = try prepared(engine, status(2, "delivered", .end))
        clock.advance(1)
        let watch = MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "watch")
        var early = token("watch", keyed: true, seed: "ef", at: clock.date)
        early.activityStartedAt = now
        tokens.put(early, key: watch)
        let mac = MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "mac")
        tokens.put(token("mac", keyed: true, seed: "fa", at: clock.date), key: mac)
        let ends = engine.sweep().flatMap(\.requests)
        #expect(ends.map(\.key) == [watch] && ends.allSatisfy { $0.event == .end })
    }

    @Test("an instance a partition goes to (or that starts) sends the end of each activity that ended there within the hour to each device whose activity started before it, though its table read the device before the end (seeds 6336, 19734: the end's maker left a device without it and stopped)")
    func recentEndsReachEveryDevice() throws {
        let clock = ManualClock(now)
        // The instance that made the end: its replica had not read the iPad's registration.
        let lagging = PartitionTokens.whole()
        lagging.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        let maker = ContentEngine(assembler: try assembler(), tokens: lagging, clock: clock)
        let start = try prepared(maker, status(1, "out_for_delivery", .start)).requests
        clock.advance(5)
        let end = try prepared(maker, status(2, "delivered", .end)).requests
        #expect(start.count == 1 && !end.contains { $0.deviceId != nil }, "no copy for the iPad")

        // The next owner read the iPad's record before the end was made, and its memory has the end.
        func nextOwner(clock: ManualClock) throws -> ContentEngine {
            let tokens = PartitionTokens.whole()
            tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
            tokens.put(token("ipad", keyed: true, seed: "cd"), key: Self.pad)
            let late = MessageKey.device(bundleId: app.bundleId, activityId: "order-42", deviceId: "mac")
            var after = token("mac", keyed: true, seed: "fa", at: now.addingTimeInterval(10))
            after.activityStartedAt = now.addingTimeInterval(10)
            tokens.put(after, key: late)
            let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
            for request in start + end { engine.replay(request, partition: 3) }
            engine.watchLateDevices()
            return engine
        }
        clock.advance(60)
        let engine = try nextOwner(clock: clock)
        #expect(engine.memory(of: Self.own)?.ended == true)
        #expect(engine.sweep(owned: [3]).isEmpty, "not before the partition is assigned")
        engine.trackChanges(of: [3])
        let items = engine.sweep(owned: [3])
        let sent = items.flatMap(\.requests)
        let ownEnd = try #require(end.last)
        #expect(sent.map(\.key) == [Self.pad], "the iPad only: the mac's activity started after the end")
        #expect(sent.first?.event == .end && sent.first?.requestId == RequestIds.catchUp(of: ownEnd.requestId, deviceId: "ipad"))
        for item in items { engine.commit(item) }
        #expect(engine.sweep(owned: [3]).isEmpty, "once")
        engine.trackChanges(of: [3, 4])
        #expect(engine.sweep(owned: [3, 4]).isEmpty, "a partition kept is not looked at again")
        engine.trackChanges(of: [4])
        engine.trackChanges(of: [3, 4])
        #expect(engine.sweep(owned: [3, 4]).flatMap(\.requests).map(\.key) == [Self.pad], "given up and assigned back: looked at again")

        // Lost (no revocation, ContentEngine.releaseTimestampFloors) and assigned again: looked at again.
        for item in engine.sweep(owned: [3, 4]) { engine.commit(item) }
        engine.releaseTimestampFloors([3])
        engine.trackChanges(of: [3, 4])
        #expect(engine.sweep(owned: [3, 4]).flatMap(\.requests).map(\.key) == [Self.pad])

        // An end made more than an hour before the assignment is not sent again.
        let later = ManualClock(clock.date.addingTimeInterval(ContentEngine.recentEndWindow))
        let old = try nextOwner(clock: later)
        old.trackChanges(of: [3])
        #expect(old.sweep(owned: [3]).isEmpty)
    }

    @Test("a device whose record the next owner read while watching, before the end was made and before the partition came to it, still gets the end once the partition does")
    func deviceReadEarlyGetsTheEnd() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        engine.watchLateDevices()
        let maker = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        let start = try prepared(maker, status(1, "out_for_delivery", .start)).requests
        for request in start { engine.replay(request, partition: 3) }
        // The iPad registers; this instance (not the owner) reads it and keeps it waiting.
        clock.advance(1)
        tokens.put(token("ipad", keyed: true, seed: "cd", at: clock.date), key: Self.pad)
        #expect(engine.sweep(owned: []).isEmpty)
        // The owner, whose replica lags, ends the activity without the iPad's copy, and stops.
        clock.advance(2)
        let end = try prepared(maker, status(2, "delivered", .end)).requests
        for request in end { engine.replay(request, partition: 3) }
        clock.advance(30)
        engine.trackChanges(of: [3])
        let sent = engine.sweep(owned: [3]).flatMap(\.requests)
        #expect(sent.map(\.key) == [Self.pad] && sent.first?.event == .end)
    }

    @Test("an activity on one device, a broadcast and a push-to-start get no copies")
    func noCopies() throws {
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: ManualClock(now))
        #expect(try prepared(engine, status(1, "placed", .start)).requests.count == 1)
        var remote = event(
            "DeliveryAttributes", .start, sequence: 1, ["orderId": .string("43"), "status": .string("placed")],
            startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("43")])
        remote.activityId = "order-43"
        remote.bundleId = app.bundleId
        tokens.put(
            TokenRecord(
                kind: .update, activityId: "order-43", deviceId: "ipad", userId: "ana", token: String(repeating: "cd", count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
                updatedAt: now, deviceKeyed: true),
            key: MessageKey.device(bundleId: app.bundleId, activityId: "order-43", deviceId: "ipad"))
        let start = try prepared(engine, remote).requests
        #expect(start.count == 1 && start[0].pushToStartKey != nil)
    }

    @Test("the freshness monitor's end at the end of the lifetime reaches every device")
    func monitorsEndReachesEveryDevice() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        tokens.put(token("phone", keyed: false, seed: "ab"), key: Self.own)
        tokens.put(token("ipad", keyed: true, seed: "cd"), key: Self.pad)
        var policy = FreshnessPolicy()
        policy.lifetime = .seconds(600)
        policy.severeAfter = .seconds(28_800)
        policy.maximumResends = 0
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, freshness: policy, clock: clock)
        _ = try prepared(engine, status(1, "placed", .start))
        clock.advance(700)
        let items = engine.sweep()
        #expect(items.count == 1)
        let item = try #require(items.first)
        #expect(item.invalidation == .lifetimeExceeded)
        #expect(item.requests.map(\.key) == [Self.pad, Self.own])
        #expect(item.requests.allSatisfy { $0.event == .end })
        #expect(item.requests[0].requestId == RequestIds.copy(of: item.requests[1].requestId, deviceId: "ipad"))
    }
}
