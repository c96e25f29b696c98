import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Issue 61 item 2: since iOS 27 a push-to-start token can go stale (APNs answers 200, no activity
/// appears). A start APNs accepted whose activity's update token does not come in time is reported
/// `startUnconfirmed`, so that token-registry stops using the push-to-start token.
@Suite("The start's watchdog: a push-to-start accepted and never confirmed by an update token")
struct StartWatchTests {
    static let activityKey = MessageKey.activity(bundleId: app.bundleId, activityId: "order-42")
    static let startKey = MessageKey.pushToStart(bundleId: app.bundleId, deviceId: "d1", attributesType: "DeliveryAttributes")

    func tokens() -> PartitionTokens {
        let tokens = PartitionTokens.whole()
        tokens.put(
            TokenRecord(
                kind: .pushToStart, deviceId: "d1", userId: "ana", token: String(repeating: "ab", count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
                updatedAt: now),
            key: Self.startKey)
        return tokens
    }

    func updateToken(at date: Date) -> TokenRecord {
        TokenRecord(
            kind: .update, activityId: "order-42", deviceId: "d1", userId: "ana", token: String(repeating: "cd", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: date,
            updatedAt: date)
    }

    /// The engine after the push-to-start was made and APNs accepted it at `now + 1`.
    func started(_ tokens: PartitionTokens, clock: ManualClock) throws -> (ContentEngine, PushRequest) {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        var start = event(
            "DeliveryAttributes", .start, sequence: 1, ["orderId": .string("42"), "status": .string("placed")],
            startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("42")])
        start.bundleId = app.bundleId
        guard case .send(let prepared) = try engine.prepare(start, partition: 0) else { throw ContentError(field: "-", problem: "ignored") }
        engine.commit(prepared)
        let request = try #require(prepared.requests.last)
        clock.advance(1)
        engine.record(
            PushOutcome(
                requestId: request.requestId, pushToStartKey: Self.startKey, result: .delivered, apns: .init(status: 200), priorityUsed: 10,
                attempts: 1, tokenFingerprint: "fp-ab", completedAt: clock.date, bundleId: app.bundleId, attributesType: "DeliveryAttributes"))
        return (engine, request)
    }

    @Test("no update token within the confirmation time (60 s): startUnconfirmed for the start, with its key and token; found again on each pass until Kafka has it, then never again; read back, the lookup's outcome says so")
    func unconfirmed() throws {
        let clock = ManualClock(now)
        let (engine, request) = try started(tokens(), clock: clock)
        let delivered = clock.date
        #expect(engine.memory(of: Self.activityKey)?.startWatch?.deliveredAt == delivered)
        clock.advance(59)
        _ = engine.sweep()
        #expect(engine.takeUnconfirmedStarts().isEmpty, "within the confirmation time")
        clock.advance(1)
        _ = engine.sweep()
        let found = engine.takeUnconfirmedStarts()
        try #require(found.count == 1)
        let outcome = found[0].outcome
        #expect(found[0].activityKey == Self.activityKey)
        #expect(outcome.result == .startUnconfirmed && outcome.requestId == request.requestId && outcome.pushToStartKey == Self.startKey)
        #expect(outcome.tokenFingerprint == "fp-ab" && outcome.bundleId == app.bundleId && outcome.attributesType == "DeliveryAttributes")
        #expect(outcome.completedAt == delivered.addingTimeInterval(60) && !outcome.result.isFinal, "stamped with the deadline")
        #expect(outcome.startActivityId == "order-42")
        #expect(throws: Never.self) { try outcome.validate() }
        // Kafka refused it: the next pass finds it again, with the same verdict time.
        clock.advance(5)
        _ = engine.sweep()
        #expect(engine.takeUnconfirmedStarts().map(\.outcome) == [outcome])
        engine.reported(found[0])
        clock.advance(5)
        _ = engine.sweep()
        #expect(engine.takeUnconfirmedStarts().isEmpty, "reported once")
        #expect(engine.memory(of: Self.activityKey)?.startWatch?.reportedAt == outcome.completedAt)
        // Read back from the outcomes topic: the start's outcome is now startUnconfirmed.
        engine.record(outcome)
        #expect(engine.memory(of: Self.activityKey)?.outcome(of: request.requestId) == .startUnconfirmed)
        // The watch survives a restart (the changelog record), reported.
        let memory = try #require(engine.memory(of: Self.activityKey))
        let restored = ActivityMemory(memory.record(activityKey: Self.activityKey, partition: 0))
        #expect(restored.startWatch == memory.startWatch)
    }

    @Test("the app registered the activity's update token in time: no startUnconfirmed, and the watch ends")
    func confirmed() throws {
        let clock = ManualClock(now)
        let tokens = tokens()
        let (engine, _) = try started(tokens, clock: clock)
        clock.advance(20)
        tokens.put(updateToken(at: clock.date), key: Self.activityKey)
        clock.advance(60)
        _ = engine.sweep()
        #expect(engine.takeUnconfirmedStarts().isEmpty)
        #expect(engine.memory(of: Self.activityKey)?.startWatch == nil)
    }

    @Test("the partition moves (or the instance restarts) between the delivery and the deadline: the next owner, restored from the changelog, reports it at the same deadline, once")
    func partitionMoves() throws {
        let clock = ManualClock(now)
        let (engine, request) = try started(tokens(), clock: clock)
        clock.advance(30)
        let record = try #require(engine.memory(of: Self.activityKey)).record(activityKey: Self.activityKey, partition: 0)
        let next = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        next.restore(Self.activityKey, ActivityMemory(record))
        _ = next.sweep()
        #expect(next.takeUnconfirmedStarts().isEmpty, "30 s after the delivery")
        clock.advance(30)
        _ = next.sweep()
        let found = next.takeUnconfirmedStarts()
        #expect(found.map(\.outcome.requestId) == [request.requestId] && found.first?.outcome.tokenFingerprint == "fp-ab")
    }

    @Test("a start APNs did not accept is not watched; an end ends the watch")
    func notWatched() throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        var start = event(
            "DeliveryAttributes", .start, sequence: 1, ["orderId": .string("42"), "status": .string("placed")],
            startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("42")])
        start.bundleId = app.bundleId
        guard case .send(let prepared) = try engine.prepare(start, partition: 0) else { Issue.record("ignored"); return }
        engine.commit(prepared)
        let request = try #require(prepared.requests.last)
        engine.record(
            PushOutcome(
                requestId: request.requestId, pushToStartKey: Self.startKey, result: .failed, attempts: 1, completedAt: clock.date,
                bundleId: app.bundleId, attributesType: "DeliveryAttributes"))
        #expect(engine.memory(of: Self.activityKey)?.startWatch == nil)

        let (other, _) = try started(tokens(), clock: clock)
        var end = event("DeliveryAttributes", .end, sequence: 2, ["orderId": .string("42"), "status": .string("delivered")])
        end.bundleId = app.bundleId
        guard case .send(let ended) = try other.prepare(end, partition: 0) else { Issue.record("ignored"); return }
        other.commit(ended)
        #expect(other.memory(of: Self.activityKey)?.startWatch == nil)
        clock.advance(120)
        _ = other.sweep()
        #expect(other.takeUnconfirmedStarts().isEmpty)
    }
}
