import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Issue 60 item 4: a push-to-start may target every device of a user.
@Suite("A push-to-start to every device of a user")
struct UserStartTests {
    static func startKey(_ deviceId: String) -> String {
        MessageKey.pushToStart(bundleId: app.bundleId, deviceId: deviceId, attributesType: "DeliveryAttributes")
    }

    func startToken(_ deviceId: String, user: String = "ana", seed: String, locale: String? = nil, state: TokenState = .active) -> TokenRecord {
        TokenRecord(
            kind: .pushToStart, deviceId: deviceId, userId: user, token: String(repeating: seed, count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: state,
            invalidation: state == .invalidated ? .init(reason: .apnsUnregistered, invalidatedAt: now) : nil, registeredAt: now, updatedAt: now,
            locale: locale)
    }

    /// Ana's phone (d1) and iPad (d2, Chinese); a stale token of hers (d4); Mallory's phone (d3).
    func tokens() -> PartitionTokens {
        let tokens = PartitionTokens.whole()
        tokens.put(startToken("d1", seed: "ab", locale: "en-US"), key: Self.startKey("d1"))
        tokens.put(startToken("d2", seed: "cd", locale: "zh-Hans-CN"), key: Self.startKey("d2"))
        tokens.put(startToken("d3", user: "mallory", seed: "ef"), key: Self.startKey("d3"))
        tokens.put(startToken("d4", seed: "fa", state: .invalidated), key: Self.startKey("d4"))
        return tokens
    }

    func start(_ target: ActivityEvent.PushToStartTarget, sequence: Int64 = 1) -> ActivityEvent {
        var start = event(
            "DeliveryAttributes", .start, sequence: sequence, ["orderId": .string("42"), "status": .string("placed")], startTarget: target,
            attributes: ["orderId": .string("42")])
        start.eventId = "start-\(sequence)"
        start.bundleId = app.bundleId
        return start
    }

    func prepared(_ engine: ContentEngine, _ event: ActivityEvent) throws -> ContentEngine.Prepared {
        guard case .send(let prepared) = try engine.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "ignored") }
        engine.commit(prepared)
        return prepared
    }

    @Test("the start goes to each of the user's devices with an active token: the first as a start to it, each other before it under a derived id, rendered in its language; no other user's device, no invalidated token")
    func startsOnEveryDevice() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        let requests = try prepared(engine, start(.init(app: app, userId: "ana"))).requests
        #expect(requests.map(\.pushToStartKey) == [Self.startKey("d2"), Self.startKey("d1")], "the other device's first, then the first device's")
        let (copy, mine) = (requests[0], requests[1])
        // Each device's start has an id of its own, derived from the event's: the first device's too.
        let eventRequest = RequestIds.content(bundleId: app.bundleId, activityId: "order-42", eventId: "start-1")
        #expect(mine.requestId == RequestIds.copy(of: eventRequest, deviceId: "d1") && copy.requestId == RequestIds.copy(of: eventRequest, deviceId: "d2"))
        #expect(mine.startGroup == mine.requestId && copy.startGroup == mine.requestId)
        #expect(copy.isStartCopy && !mine.isStartCopy)
        #expect(mine.event == .start && copy.event == .start && copy.contentSequence == mine.contentSequence && copy.apnsTimestamp == mine.apnsTimestamp)
        #expect(copy.sourceActivityId == "order-42" && copy.activityId == nil)
        #expect(mine.payload.contains("Order received") && copy.payload.contains("订单已接收"))
        for request in requests { #expect(throws: Never.self) { try request.validate() } }
        var bytes: [UInt8] = []
        copy.writeJSON(into: &bytes)
        #expect(try IsletJSON.decode(PushRequest.self, from: bytes) == copy, "the group survives the wire")
        let memory = try #require(engine.memory(of: "com.example.food/order-42"))
        #expect(memory.latest?.requestId == mine.requestId && memory.latest?.isUserStart == true && memory.startedWith == Self.startKey("d1"))

        // A user without a device: a clear refusal, nothing made.
        var bob = start(.init(app: app, userId: "bob"))
        bob.activityId = "order-99"
        #expect { try engine.prepare(bob) } throws: { ($0 as? ContentError)?.field == "startTarget.userId" }
    }

    @Test("read back (another instance, a restart), the first device's start is the activity's memory, and each device's outcome still finds the activity")
    func readBack() throws {
        let maker = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        let requests = try prepared(maker, start(.init(app: app, userId: "ana"))).requests
        let reader = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        for request in requests { reader.replay(request, partition: 0) }
        let memory = try #require(reader.memory(of: "com.example.food/order-42"))
        #expect(memory.latest?.requestId == requests[1].requestId && memory.latest?.isUserStart == true)
        reader.record(PushOutcome(requestId: requests[0].requestId, pushToStartKey: Self.startKey("d2"), result: .delivered, attempts: 1, completedAt: now))
        #expect(reader.memory(of: "com.example.food/order-42") == memory, "another device's outcome is not the activity's")
        reader.record(PushOutcome(requestId: requests[1].requestId, pushToStartKey: Self.startKey("d1"), result: .delivered, attempts: 1, completedAt: now))
        #expect(reader.memory(of: "com.example.food/order-42")?.latestOutcome == .delivered, "the first device's is")
        // Through the changelog: the start is still known as a user's.
        let record = memory.record(activityKey: "com.example.food/order-42", partition: 0)
        #expect(record.latest?.userStart == true)
        let wire = try JSONDecoder().decode(ContentMemoryRecord.Activity.self, from: try JSONEncoder().encode(record))
        #expect(ActivityMemory(wire).latest?.isUserStart == true)
    }

    @Test("a first device's start that certainly did not arrive lets the backend start again when it went to that device alone, never when it went to every device of the user (another may have it: a second activity there)")
    func noSecondStartAfterAUserStart() throws {
        for target in [ActivityEvent.PushToStartTarget(app: app, deviceId: "d1"), .init(app: app, userId: "ana")] {
            let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
            let own = try #require(try prepared(engine, start(target)).requests.last)
            engine.record(PushOutcome(requestId: own.requestId, pushToStartKey: own.pushToStartKey, result: .tokenInvalid, attempts: 1, completedAt: now))
            if target.userId == nil {
                #expect(throws: Never.self) { try engine.prepare(start(target, sequence: 2)) }
            } else {
                #expect { try engine.prepare(start(target, sequence: 2)) } throws: { ($0 as? ContentError)?.field == "kind" }
            }
        }
    }

    @Test("a start that reaches devices after the activity's end was made (the dispatcher could not read its outcomes for minutes) gets that end: for the activity's own token and for each such device's record, once, each waiting for its token (seed 24440)")
    func lateStartGetsTheEnd() throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        let starts = try prepared(engine, start(.init(app: app, userId: "ana"))).requests
        clock.advance(5)
        var end = event("DeliveryAttributes", .end, sequence: 2, ["orderId": .string("42"), "status": .string("delivered")])
        end.bundleId = app.bundleId
        let ended = try prepared(engine, end).requests
        clock.advance(300)
        // An outcome read again (a restart reads those since the changelog's checkpoint), or one
        // that came before the end was made: nothing owed.
        let before = PushOutcome(requestId: starts[0].requestId, pushToStartKey: starts[0].pushToStartKey, result: .delivered, attempts: 1, completedAt: now.addingTimeInterval(1))
        engine.record(before, at: KafkaPosition(partition: 1, offset: 7))
        #expect(engine.sweep().isEmpty)
        let ownEnd = try #require(ended.last)
        #expect(ownEnd.event == .end && engine.memory(of: "com.example.food/order-42")?.ended == true)
        #expect(engine.sweep().isEmpty, "nothing owed yet")
        // The iPad's start (a copy) is delivered now, after the end: the iPad shows the activity.
        let late = PushOutcome(requestId: starts[0].requestId, pushToStartKey: starts[0].pushToStartKey, result: .delivered, attempts: 1, completedAt: clock.date)
        engine.record(late, at: KafkaPosition(partition: 1, offset: 8))
        let sent = engine.sweep().flatMap(\.requests)
        #expect(sent.count == 2 && sent.allSatisfy { $0.event == .end && $0.tokenRegisteredAt == nil })
        #expect(sent.first { $0.deviceId == "d2" }?.requestId == RequestIds.catchUp(of: ownEnd.requestId, deviceId: "d2"))
        #expect(sent.first { $0.deviceId == nil }?.requestId == RequestIds.catchUp(of: ownEnd.requestId, deviceId: ""))
        #expect(sent.first { $0.deviceId == nil }?.key == "com.example.food/order-42")
        #expect(engine.sweep().isEmpty, "once")
        // Read again (a restart): the same ends, under the same ids, which the dispatcher takes once.
        engine.record(late, at: KafkaPosition(partition: 1, offset: 8))
        #expect(engine.sweep().flatMap(\.requests).map(\.requestId) == sent.map(\.requestId))
        // A start refused: nothing owed.
        engine.record(PushOutcome(requestId: starts[1].requestId, pushToStartKey: starts[1].pushToStartKey, result: .tokenInvalid, attempts: 1, completedAt: clock.date))
        #expect(engine.sweep().isEmpty)
    }

    @Test("the same start read again soon (a writer stopped after Kafka stored the first device's start but not another's) makes every device's start again under the same ids, changing no memory; later, or for a user whose devices are gone, it is a duplicate")
    func startsMadeAgain() throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        let event = start(.init(app: app, userId: "ana"))
        let first = try prepared(engine, event).requests
        let memory = engine.memory(of: "com.example.food/order-42")
        clock.advance(30)
        guard case .send(let again) = try engine.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "ignored") }
        #expect(again.requests.map(\.requestId) == first.map(\.requestId) && again.memory == nil)
        engine.commit(again)
        #expect(engine.memory(of: "com.example.food/order-42") == memory)
        // Another event with the start's sequence (another id: a backend's retry under another
        // idempotency key) is a duplicate: no second start on any device.
        var other = event
        other.eventId = "start-1-again"
        guard case .ignore = try engine.prepare(other, partition: 0) else { throw ContentError(field: "-", problem: "a second start was made") }
        clock.advance(ContentEngine.startsAgainWindow)
        guard case .ignore = try engine.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "sent") }
        // Read again when the user has no device any more: still a duplicate, not an error.
        let empty = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        for request in first { empty.replay(request, partition: 0) }
        guard case .ignore = try empty.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "sent") }
    }

    @Test("an outcome of a start that comes after another start on the same device finds its own activity, not the later one's (seed 828)")
    func lateOutcomeFindsItsActivity() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now))
        let first = try #require(try prepared(engine, start(.init(app: app, deviceId: "d1"))).requests.last)
        var second = start(.init(app: app, deviceId: "d1"))
        second.activityId = "order-43"
        second.eventId = "start-43"
        _ = try prepared(engine, second)
        engine.record(PushOutcome(requestId: first.requestId, pushToStartKey: first.pushToStartKey, result: .delivered, attempts: 1, completedAt: now))
        #expect(engine.memory(of: "com.example.food/order-42")?.latestOutcome == .delivered)
        #expect(engine.memory(of: "com.example.food/order-43")?.latestOutcome == nil)
    }

    @Test("the token table knows each user's push-to-start devices by app and type, following re-registrations and removals")
    func tableIndex() {
        let tokens = tokens()
        let owner = "ana"
        #expect(tokens.pushToStartKeys(bundleId: app.bundleId, attributesType: "DeliveryAttributes", userId: owner) == ["d1", "d2", "d4"].map(Self.startKey))
        #expect(tokens.pushToStartKeys(bundleId: app.bundleId, attributesType: "RideAttributes", userId: owner).isEmpty)
        // d2 re-registered by Mallory (the device changed hands): Ana's no more.
        tokens.put(startToken("d2", user: "mallory", seed: "cd"), key: Self.startKey("d2"))
        #expect(tokens.pushToStartKeys(bundleId: app.bundleId, attributesType: "DeliveryAttributes", userId: owner) == ["d1", "d4"].map(Self.startKey))
        #expect(tokens.pushToStartKeys(bundleId: app.bundleId, attributesType: "DeliveryAttributes", userId: "mallory") == ["d2", "d3"].map(Self.startKey))
        tokens.remove(key: Self.startKey("d4"), partition: 0, offset: .max)
        #expect(tokens.pushToStartKeys(bundleId: app.bundleId, attributesType: "DeliveryAttributes", userId: owner) == [Self.startKey("d1")])
    }

    @Test("a start target names exactly one of a device and a user", arguments: [(nil, nil), ("d1", "ana"), (nil, "")] as [(String?, String?)])
    func exactlyOneTarget(deviceId: String?, userId: String?) {
        var event = start(.init(app: app, deviceId: "d1"))
        event.startTarget?.deviceId = deviceId
        event.startTarget?.userId = userId
        #expect(throws: MessageValidationError.self) { try event.validate() }
    }
}
