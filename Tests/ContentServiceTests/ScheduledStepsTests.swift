import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Scheduled steps (issue 60, item 2): an event with a future `at` is kept and sent at its time,
/// unless a newer event, the end or a step of the same sequence supersedes it first.
@Suite("Scheduled steps")
struct ScheduledStepsTests {
    let clock = ManualClock(now)
    let engine: ContentEngine

    init() throws {
        engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
    }

    func delivery(_ status: String, _ kind: ActivityEventKind = .update, sequence: Int64, at: TimeInterval? = nil) -> ActivityEvent {
        var event = event("DeliveryAttributes", kind, sequence: sequence, at: clock.date.timeIntervalSince(now), ["orderId": .string("42"), "status": .string(status)])
        event.bundleId = app.bundleId
        event.at = at.map { clock.date.addingTimeInterval($0) }
        return event
    }

    /// What the loop does: applied now, or kept for later.
    @discardableResult
    func apply(_ event: ActivityEvent) throws -> [PushRequest] {
        switch try engine.prepare(event, partition: 0) {
        case .send(let prepared):
            engine.commit(prepared)
            return prepared.requests
        case .schedule(let scheduled):
            engine.commit(scheduled)
            return []
        case .ignore:
            return []
        }
    }

    /// What StepSender does: the steps due now, sent (or let go), by `engine` (this test's by default).
    func fire(_ other: ContentEngine? = nil) throws -> [PushRequest] {
        let engine = other ?? self.engine
        var sent: [PushRequest] = []
        for step in engine.dueSteps(owned: [0]) {
            if case .send(let prepared) = try engine.prepare(step.event, partition: step.partition, firing: true) {
                engine.commit(prepared)
                sent += prepared.requests
            } else {
                engine.dropStep(step)
            }
        }
        return sent
    }

    var key: String { "com.example.food/order-42" }

    @Test("a step is kept (nothing sent), shown, and sent at its time as an update with its content; then it is gone")
    func sentAtItsTime() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        #expect(try apply(delivery("delivered", sequence: 1_000, at: 600)).isEmpty)
        #expect(engine.steps(of: key).map(\.sequence) == [1_000])
        #expect(engine.memory(of: key)?.lastSequence == 1, "a step does not move the sequence on before its time")
        clock.advance(599)
        #expect(try fire().isEmpty, "not before its time")
        #expect(try apply(delivery("out_for_delivery", sequence: 2)).count == 1, "updates of lower sequences go on meanwhile")
        clock.advance(1)
        let sent = try fire()
        #expect(sent.count == 1 && sent[0].event == .update && sent[0].contentSequence == 1_000)
        #expect(sent[0].state == "delivered")
        #expect(engine.steps(of: key).isEmpty)
        #expect(try fire().isEmpty, "sent once")
        #expect(engine.memory(of: key)?.lastSequence == 1_000)
    }

    @Test("a newer event (its sequence or above) supersedes a step; a lower one does not")
    func supersededBySequence() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("arrived", sequence: 10, at: 300))
        try apply(delivery("out_for_delivery", sequence: 9))
        #expect(engine.steps(of: key).count == 1)
        try apply(delivery("delivered", sequence: 10))
        #expect(engine.steps(of: key).isEmpty)
        clock.advance(300)
        #expect(try fire().isEmpty)
    }

    @Test("a step sent again with its sequence replaces it (moved): sent at the new time only")
    func moved() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("arrived", sequence: 10, at: 300))
        try apply(delivery("arrived", sequence: 10, at: 600))
        #expect(engine.steps(of: key).map { $0.at?.timeIntervalSince(now) } == [600])
        clock.advance(300)
        #expect(try fire().isEmpty, "not at its old time")
        clock.advance(300)
        #expect(try fire().map(\.contentSequence) == [10])
    }

    @Test("the end lets every step go; a scheduled end ends the activity at its time")
    func ends() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("arrived", sequence: 10, at: 300))
        try apply(delivery("delivered", .end, sequence: 11, at: 900))
        #expect(engine.steps(of: key).map(\.sequence) == [10, 11], "the earliest first")
        clock.advance(300)
        #expect(try fire().map(\.event) == [.update])
        clock.advance(600)
        #expect(try fire().map(\.event).contains(.end))
        #expect(engine.memory(of: key)?.ended == true)

        // An end applied now supersedes what is left.
        let other = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        var step = delivery("arrived", sequence: 20, at: 300)
        step.activityId = "order-43"
        var start = delivery("preparing", .start, sequence: 1)
        start.activityId = "order-43"
        var end = delivery("cancelled", .end, sequence: 2)
        end.activityId = "order-43"
        for event in [start, step, end] {
            switch try other.prepare(event, partition: 0) {
            case .send(let prepared): other.commit(prepared)
            case .schedule(let scheduled): other.commit(scheduled)
            case .ignore: break
            }
        }
        #expect(other.steps(of: "com.example.food/order-43").isEmpty)
    }

    @Test("what a step cannot be is refused when it is sent, not at its time: a field its template refuses, too far ahead, too many steps, a scheduled start")
    func refusals() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        var bad = delivery("arrived", sequence: 5, at: 300)
        bad.fields["etaAt"] = .string("soon")
        #expect(throws: ContentError.self) { try engine.prepare(bad, partition: 0) }
        #expect(throws: ContentError.self) { try engine.prepare(delivery("arrived", sequence: 5, at: 9 * 3_600), partition: 0) }
        for number in 0..<ActivityMemory.maximumSteps { try apply(delivery("arrived", sequence: 10 + Int64(number), at: 300 + Double(number))) }
        do {
            _ = try engine.prepare(delivery("arrived", sequence: 100, at: 900), partition: 0)
            Issue.record("a ninth step was taken")
        } catch {
            #expect(error.field == "at")
        }
        // Moving one of the eight is allowed.
        try apply(delivery("arrived", sequence: 10, at: 1_200))
        #expect(engine.steps(of: key).count == ActivityMemory.maximumSteps)
        #expect(throws: MessageValidationError.self) { try delivery("preparing", .start, sequence: 2, at: 300).validate() }
        #expect(engine.steps(of: key).allSatisfy { $0.sequence >= 10 }, "nothing refused was kept")
    }

    @Test("an `at` within a second of now (or past) is sent at once")
    func notForLater() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        #expect(try apply(delivery("arrived", sequence: 2, at: 0.5)).count == 1)
        #expect(try apply(delivery("delivered", sequence: 3, at: -60)).count == 1)
        #expect(engine.steps(of: key).isEmpty)
    }

    @Test("steps travel in the activity's changelog record: the next owner sends them at their time; those a request read after the checkpoint supersedes are not; another partition's wait for its owner")
    func restored() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("arrived", sequence: 10, at: 300))
        try apply(delivery("arriving", sequence: 5, at: 200))
        let record = try #require(engine.memory(of: key)).record(activityKey: key, partition: 0)
        #expect(record.steps?.map(\.sequence) == [5, 10])
        let decoded = try IsletJSON.decode(ContentMemoryRecord.self, from: IsletJSON.encode(ContentMemoryRecord(activity: record, writtenAt: now)))
        // Another instance: the memory from the changelog, then a request read after the
        // checkpoint (sequence 5 was applied after all: its step is superseded).
        let next = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        next.restore(key, ActivityMemory(try #require(decoded.activity)))
        #expect(next.steps(of: key).map(\.sequence) == [5, 10])
        guard case .send(let applied) = try engine.prepare(delivery("arriving", sequence: 5), partition: 0) else {
            Issue.record("not sent")
            return
        }
        for request in applied.requests { next.replay(request, partition: 0) }
        #expect(next.steps(of: key).map(\.sequence) == [10])
        clock.advance(300)
        #expect(next.dueSteps(owned: [1]).isEmpty, "another instance's partition")
        clock.advance(1)
        #expect(try fire(next).map(\.contentSequence) == [10], "sent by the owner, once it looks")
    }

    @Test("an activity ended, then started again under the same id with lower sequences: a step of its first life never reaches the second, also after a restore")
    func newLife() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("delivered", sequence: 1_000, at: 600))
        try apply(delivery("cancelled", .end, sequence: 5))
        try apply(delivery("preparing", .start, sequence: 6))
        #expect(engine.steps(of: key).isEmpty)
        let next = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        next.restore(key, ActivityMemory(try #require(engine.memory(of: key)).record(activityKey: key, partition: 0)))
        clock.advance(600)
        #expect(next.dueSteps(owned: [0]).isEmpty)
        #expect(try fire().isEmpty)
    }

    @Test("a scheduled end whose alerting update was written and the end not (a crash between): the next owner still sends the end, and only the end")
    func endWrittenInPart() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        try apply(delivery("delivered", .end, sequence: 10, at: 300))
        let before = try #require(engine.memory(of: key)).record(activityKey: key, partition: 0)
        clock.advance(300)
        let sent = try fire()
        try #require(sent.count == 2, "an alerting update before the end: \(sent.map(\.event))")
        let next = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        next.restore(key, ActivityMemory(before))
        next.replay(sent[0], partition: 0)
        #expect(next.steps(of: key).map(\.sequence) == [10], "the end is still owed")
        #expect(try fire(next).map(\.requestId) == [sent[1].requestId])
    }

    @Test("a step that names no app keeps the app it was scheduled for; the event's wire form keeps `at`")
    func appAndWireForm() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        var step = delivery("delivered", sequence: 10, at: 300)
        step.bundleId = nil
        try apply(step)
        #expect(engine.steps(of: key).first?.bundleId == app.bundleId)
        let decoded = try IsletJSON.decode(ActivityEvent.self, from: IsletJSON.encode(step))
        #expect(decoded.at == step.at)
    }

    @Test("moving a step again and again does not grow the queue without bound")
    func queueBounded() throws {
        try apply(delivery("preparing", .start, sequence: 1))
        for move in 0..<5_000 { try apply(delivery("delivered", sequence: 10, at: 300 + Double(move))) }
        #expect(engine.queuedSteps < 2_100, "\(engine.queuedSteps) entries for one step")
        clock.advance(300 + 5_000)
        let due = engine.dueSteps(owned: [0])
        #expect(due.map(\.event.sequence) == [10], "\(engine.steps(of: key).map { $0.at?.timeIntervalSince(now) }) \(engine.queuedSteps)")
        for step in due {
            guard case .send = try engine.prepare(step.event, partition: step.partition, firing: true) else {
                Issue.record("not sent: \(try engine.prepare(step.event, partition: step.partition, firing: true))")
                continue
            }
        }
    }
}
