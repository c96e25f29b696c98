import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import ContentService

private let fields: [String: JSONValue] = ["orderId": .string("42"), "courier": .object(["name": .string("Ana")])]

private func delivery(_ status: String, sequence: Int64, at clock: ManualClock, id: String? = nil) -> ActivityEvent {
    var values = fields
    values["status"] = .string(status)
    var made = event("DeliveryAttributes", .update, sequence: sequence, at: clock.date.timeIntervalSince(now), values)
    made.bundleId = app.bundleId
    if let id { made.eventId = id }
    return made
}

private func requests(_ decision: ContentEngine.Decision) -> [PushRequest] {
    guard case .send(let prepared) = decision else { return [] }
    return prepared.requests
}

private func register(_ tokens: PartitionTokens, version: String, locale: String? = nil, at clock: ManualClock) {
    let record = TokenRecord(
        kind: .update, activityId: "order-42", userId: "u", token: String(repeating: "ab", count: 32), app: app, attributesType: "DeliveryAttributes",
        frequentUpdatesEnabled: false, appVersion: version, state: .active, registeredAt: clock.date, updatedAt: clock.date, locale: locale)
    tokens.put(record, key: record.key!)
}

/// An event a backend hands content-service is assembled when it is checked and, when its
/// inputs have not changed by the time the owner reads it back, those requests are the ones sent
/// (issue 59: assembled once). The requests' `createdAt` tells which assembly was used: the
/// clock moves between the check and the read.
@Suite("Events assembled once: at the check, used when read back if nothing they read changed")
struct AssembledAheadTests {
    let clock = ManualClock(now)
    let tokens = PartitionTokens.whole()
    let engine: ContentEngine

    init() throws {
        engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        register(tokens, version: "9.0", at: clock)
    }

    /// Commits `event` as the loop does, on partition 0.
    @discardableResult
    func handle(_ event: ActivityEvent, images: [String: [String]] = [:]) throws -> [PushRequest] {
        let decision = try engine.prepare(event, partition: 0, images: images)
        if case .send(let prepared) = decision { engine.commit(prepared) }
        return requests(decision)
    }

    @Test("nothing changed: the requests made at the check are sent, the entry taken once")
    func reused() throws {
        try handle(delivery("preparing", sequence: 1, at: clock))
        let event = delivery("out_for_delivery", sequence: 2, at: clock)
        let ahead = requests(try engine.prepareAhead(event, partition: 0))
        #expect(ahead.count == 1 && engine.assembledAhead.count == 1)
        clock.advance(by: .seconds(1))
        #expect(try handle(event) == ahead, "the same requests, made at the check")
        #expect(engine.assembledAhead.count == 0)
        // Read again (published twice): assembled again, and a duplicate.
        guard case .ignore(let why) = try engine.prepare(event, partition: 0) else { Issue.record("not ignored"); return }
        #expect(why.contains("duplicate"))
    }

    @Test("a first event of an activity, its partition known at the check, is reused too")
    func firstEvent() throws {
        let event = delivery("preparing", sequence: 1, at: clock)
        let ahead = requests(try engine.prepareAhead(event, partition: 0))
        clock.advance(by: .milliseconds(30))
        #expect(try handle(event) == ahead)
    }

    enum Change: String, CaseIterable, CustomTestStringConvertible {
        case anotherEvent, outcome, tokenRotated, images, tooOld, otherEventSameId, otherPartition, partitionAssigned
        var testDescription: String { rawValue }
    }

    @Test("anything the assembly read changed since the check: assembled again from what is true at the read", arguments: Change.allCases)
    func assembledAgain(_ change: Change) throws {
        let first = try handle(delivery("preparing", sequence: 1, at: clock))
        var event = delivery("out_for_delivery", sequence: 3, at: clock)
        let ahead = requests(try engine.prepareAhead(event, partition: 0))
        clock.advance(by: .seconds(1))
        var images: [String: [String]] = [:]
        var partition: Int32 = 0
        switch change {
        case .anotherEvent:
            // The loop handles an earlier event of the activity between the check and the read.
            try handle(delivery("picked_up", sequence: 2, at: clock))
        case .outcome:
            engine.record(
                PushOutcome(requestId: first[0].requestId, activityId: "order-42", result: .delivered, attempts: 1, completedAt: clock.date, bundleId: app.bundleId))
        case .tokenRotated:
            register(tokens, version: "9.1", locale: "fr", at: clock)
        case .images:
            images = ["https://img.example.com/a.png": ["AAAA"]]
        case .tooOld:
            clock.advance(by: .seconds(AssembledAhead.maximumAge))
        case .otherEventSameId:
            event = delivery("arriving", sequence: 3, at: clock, id: event.eventId)
        case .otherPartition:
            partition = 1
        case .partitionAssigned:
            // The partition (re)assigned: its timestamps start past a floor it did not have.
            engine.trackChanges(of: [0])
        }
        let decision = try engine.prepare(event, partition: partition, images: images)
        let sent = requests(decision)
        #expect(sent.count == 1)
        #expect(sent.first?.createdAt == clock.date, "made at the read, not at the check")
        #expect(sent != ahead)
        if change == .otherEventSameId { #expect(sent.first?.state == "arriving") }
        if change == .tokenRotated { #expect(sent.first?.tokenRegisteredAt == clock.date) }
    }

    @Test("an alert of the activity leaving the alert window between the check and the read: assembled again (its memory of alerts differs)")
    func alertLeavesTheWindow() throws {
        let first = try handle(delivery("out_for_delivery", sequence: 1, at: clock))
        #expect(first.first?.alerting == true)
        clock.advance(by: ContentPolicy().alertWindow - .seconds(1))
        let event = delivery("arriving", sequence: 2, at: clock)
        _ = try engine.prepareAhead(event, partition: 0)
        clock.advance(by: .seconds(1.5))
        let sent = try handle(event)
        #expect(sent.first?.createdAt == clock.date, "made at the read")
        #expect(engine.eventsAssembledOnce == 0)
    }

    @Test("through EventIntake, the event read back from its bytes (dates to the millisecond) is the event checked: assembled once")
    func throughTheIntake() async throws {
        clock.advance(0.123_456_7)
        let published = RecordingEvents()
        let bytes = Mutex<[[UInt8]]>([])
        let intake = EventIntake(engine: engine, partition: { _ in 0 }, owned: { [0] }) { event in
            try published.publish(event)
            let encoded = try IsletJSON.encode(event)
            bytes.withLock { $0.append(encoded) }
        }
        var fields = fields
        fields["status"] = .string("out_for_delivery")
        fields["progress"] = .number(40.0)
        let given = ActivityEvent(
            eventId: "e-intake", activityId: "order-42", kind: .update, attributesType: "DeliveryAttributes", fields: fields, urgency: .important,
            occurredAt: clock.date, sequence: 1, bundleId: app.bundleId)
        let ids = try await intake.accept(given)
        clock.advance(by: .milliseconds(20))
        let read = try IsletJSON.decode(ActivityEvent.self, from: try #require(bytes.withLock { $0.first }))
        let sent = try handle(read)
        #expect(sent.map(\.requestId) == ids)
        #expect(engine.eventsAssembledOnce == 1, "the read-back event is the one kept")

        // Not kept where another instance reads the partition back.
        let elsewhere = EventIntake(engine: engine, partition: { _ in 0 }, owned: { [1] }) { _ in }
        var next = given
        (next.eventId, next.sequence) = ("e-elsewhere", 2)
        _ = try await elsewhere.accept(next)
        #expect(engine.assembledAhead.count == 0)
    }

    @Test("entries never read back fall out: by age, and beyond the capacity the oldest first")
    func bounded() throws {
        for sequence in 1...3 { _ = try engine.prepareAhead(delivery("preparing", sequence: Int64(sequence), at: clock, id: "old-\(sequence)"), partition: 0) }
        #expect(engine.assembledAhead.count == 3)
        clock.advance(by: .seconds(AssembledAhead.maximumAge + 1))
        _ = try engine.prepareAhead(delivery("preparing", sequence: 1, at: clock), partition: 0)
        #expect(engine.assembledAhead.count == 1, "the three older than the age fell out")

        let ahead = AssembledAhead()
        let event = delivery("preparing", sequence: 1, at: clock)
        let inputs = try engine.inputs(of: event, partition: 0).inputs
        for index in 0...AssembledAhead.capacity {
            var kept = event
            kept.eventId = "e-\(index)"
            ahead.keep(kept, inputs: inputs, decision: .ignore("test"), at: clock.date)
        }
        #expect(ahead.count == AssembledAhead.capacity)
        var oldest = event
        oldest.eventId = "e-0"
        #expect(ahead.take(oldest, inputs: inputs, withImages: false, now: clock.date, alertWindow: 3_600) == nil, "the oldest fell out")
        var newest = event
        newest.eventId = "e-\(AssembledAhead.capacity)"
        #expect(ahead.take(newest, inputs: inputs, withImages: false, now: clock.date, alertWindow: 3_600) != nil)
    }
}
