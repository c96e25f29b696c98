import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// An event whose requests reached Kafka in part (found by the simulation, issue 57: seed 1411 —
/// an end's alerting update was written, the end refused as its writer stopped; the next owner
/// read the event again, took it for a duplicate, and the activity never ended).
@Suite("An event written in part")
struct PartialEventTests {
    func prepared(_ engine: ContentEngine, _ event: ActivityEvent) throws -> ContentEngine.Prepared? {
        if case .send(let prepared) = try engine.prepare(event, partition: 1) { return prepared }
        return nil
    }

    let fields: [String: JSONValue] = ["orderId": .string("42"), "status": .string("out_for_delivery"), "progress": .integer(60)]
    var end: ActivityEvent { event("DeliveryAttributes", .end, sequence: 2, ["orderId": .string("42"), "status": .string("delivered"), "progress": .integer(100)]) }

    @Test("an end whose alerting update is on the topic and the end not: the next owner writes the end (the same request id), and only the end")
    func endOwedAfterItsAlert() throws {
        let first = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let update = try #require(try prepared(first, event("DeliveryAttributes", sequence: 1, fields)))
        first.commit(update)
        let ending = try #require(try prepared(first, end))
        try #require(ending.requests.map(\.event) == [.update, .end], "the final state alerts: an alerting update, then the end")
        first.commit(ending)

        // The next owner restores the activity from the topic: the update and the alert only.
        let next = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now.addingTimeInterval(10)))
        next.replay(update.requests[0], partition: 1)
        next.replay(ending.requests[0], partition: 1)
        let owed = try #require(try prepared(next, end), "the event read again is not a duplicate while its end is owed")
        #expect(owed.requests.map(\.event) == [.end])
        #expect(owed.requests.first?.requestId == ending.requests[1].requestId, "the same request: a copy already written joins it")
        #expect((owed.requests.first?.apnsTimestamp ?? 0) > ending.requests[0].apnsTimestamp, "not older than the alert shown")
        next.commit(owed)
        if case .send = try next.prepare(end, partition: 1) { Issue.record("the end was written: the event again is a duplicate") }

        // The freshness monitor sent the alert's content again before the event was read again:
        // the end is still owed.
        let resent = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now.addingTimeInterval(10)))
        var resend = ending.requests[0]
        resend.requestId = RequestIds.resend(of: resend.requestId, number: 1)
        resend.sourceEventId = nil
        resend.apnsTimestamp += 1
        resend.createdAt = now.addingTimeInterval(5)
        for request in [update.requests[0], ending.requests[0], resend] { resent.replay(request, partition: 1) }
        let owedAfterResend = try #require(try prepared(resent, end), "a re-send in between does not make the event a duplicate")
        #expect(owedAfterResend.requests.map(\.requestId) == [ending.requests[1].requestId])
        #expect((owedAfterResend.requests.first?.apnsTimestamp ?? 0) > resend.apnsTimestamp, "not older than the re-send shown")

        // Both on the topic: a duplicate, as before.
        let whole = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now.addingTimeInterval(10)))
        for request in update.requests + ending.requests { whole.replay(request, partition: 1) }
        if case .send = try whole.prepare(end, partition: 1) { Issue.record("an end written whole is a duplicate") }
    }
}
