import Foundation
import IsletMessages
import Testing
@testable import ContentService

/// Per-event presentation (issue 60, item 3): an event may set its end's dismissal, its relevance,
/// its stale time, its alert's texts and sound, each checked against Apple's rules; absent, the
/// template's state and the policy decide as before.
@Suite("Per-event presentation: dismissal, relevance, stale time, alert texts and sound")
struct PresentationTests {
    func requests(_ event: ActivityEvent, memory: inout ActivityMemory) throws -> [PushRequest] {
        try assembler().assemble(event, app: app, appVersion: AppVersion("3.0")!, locale: nil, memory: &memory, now: now).requests
    }

    static let arriving: [String: JSONValue] = ["status": .string("arriving"), "orderId": .string("42"), "courier": .object(["name": .string("Ana")])]

    @Test("each member refused by Apple's rules, naming it", arguments: [
        (ActivityEventKind.update, EventPresentation(dismissal: .immediate), "presentation.dismissal"),
        (.end, EventPresentation(dismissal: .at(now.addingTimeInterval(5 * 3_600))), "presentation.dismissal"),
        (.end, EventPresentation(dismissal: .at(now.addingTimeInterval(-60))), "presentation.dismissal"),
        (.update, EventPresentation(relevanceScore: 101), "presentation.relevanceScore"),
        (.update, EventPresentation(relevanceScore: .nan), "presentation.relevanceScore"),
        (.update, EventPresentation(staleAfterSeconds: 5), "presentation.staleAfterSeconds"),
        (.update, EventPresentation(sound: "../etc/passwd"), "presentation.sound"),
        (.update, EventPresentation(alert: .init(title: "")), "presentation.alert.title"),
        (.update, EventPresentation(alert: .init(title: "t", body: String(repeating: "b", count: 1_025))), "presentation.alert.body"),
    ])
    func refused(kind: ActivityEventKind, presentation: EventPresentation, field: String) {
        var made = event("DeliveryAttributes", kind, sequence: 1, Self.arriving)
        made.presentation = presentation
        let error = #expect(throws: MessageValidationError.self) { try made.validate() }
        #expect(error?.field == field)
    }

    @Test("the presentation travels on the topic: written and read back the same, by the fast reader and by Codable")
    func wire() throws {
        var made = event("DeliveryAttributes", .end, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(
            dismissal: .at(Date(timeIntervalSince1970: 1_795_003_600)), relevanceScore: 77.5, staleAfterSeconds: 60, sound: "ding.caf",
            alert: .init(title: "Here", body: "At the door"))
        let bytes = try IsletJSON.encode(made)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: bytes) == made)
        #expect(try IsletJSON.decodeWithDecoder(ActivityEvent.self, from: bytes) == made)
        made.presentation = EventPresentation(dismissal: .immediate)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: try IsletJSON.encode(made)) == made)
        #expect(String(decoding: try IsletJSON.encode(made), as: UTF8.self).contains(#""dismissal":"immediate""#))
    }

    @Test("an update: its relevance, stale time, alert texts and sound in place of the state's")
    func update() throws {
        var memory = ActivityMemory()
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(relevanceScore: 77, staleAfterSeconds: 60, sound: "ding.caf", alert: .init(title: "Ana is here", body: "Door 4B"))
        let sent = try aps(try #require(try requests(made, memory: &memory).first))
        #expect(sent["relevance-score"] == .integer(77) || sent["relevance-score"] == .number(77))
        #expect(sent["stale-date"] == .integer(Int64(now.timeIntervalSince1970) + 60))
        #expect(sent["alert"] == .object(["title": .string("Ana is here"), "body": .string("Door 4B"), "sound": .string("ding.caf")]))

        // Routine: the alert policy still decides; no alert.
        var quiet = event("DeliveryAttributes", .update, sequence: 2, urgency: .routine, ["status": .string("delivered"), "orderId": .string("42")])
        quiet.presentation = EventPresentation(alert: .init(title: "Delivered"))
        #expect(try aps(try #require(try requests(quiet, memory: &memory).first))["alert"] == nil)
    }

    @Test("a dismissal time is sent within 4 hours of the end's sending, whatever the event's own time")
    func dismissalWithinFourHours() throws {
        var memory = ActivityMemory()
        // The backend's clock is 10 hours ahead: its event is valid (3 h after its own time).
        var made = event("DeliveryAttributes", .end, sequence: 1, urgency: .routine, at: 10 * 3_600, Self.arriving)
        made.presentation = EventPresentation(dismissal: .at(now.addingTimeInterval(13 * 3_600)))
        try made.validate()
        let end = try #require(try requests(made, memory: &memory).last)
        #expect(try aps(end)["dismissal-date"] == .integer(Int64(now.timeIntervalSince1970) + 4 * 3_600))
    }

    @Test("an end: dismissed at once, at the event's time, or by the policy when it says nothing")
    func dismissal() throws {
        for (dismissal, expected) in [
            (EventPresentation.Dismissal.immediate, Int64(now.timeIntervalSince1970) - 1),
            (.at(now.addingTimeInterval(600)), Int64(now.timeIntervalSince1970) + 600),
            (nil, ContentPolicy().dismissalDate(now: now)!),
        ] {
            var memory = ActivityMemory()
            var made = event("DeliveryAttributes", .end, sequence: 1, urgency: .routine, Self.arriving)
            made.presentation = dismissal.map { EventPresentation(dismissal: $0) }
            let end = try #require(try requests(made, memory: &memory).last)
            #expect(try aps(end)["dismissal-date"] == .integer(expected), "\(String(describing: dismissal))")
        }
    }
}
