import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import IsletTesting
import IsletTokens
import SwiftProtobuf
import Synchronization
import Testing
@testable import ContentService

/// Collects what the service publishes; fails while `failing` is set.
final class RecordingEvents: Sendable {
    private let state = Mutex<(events: [ActivityEvent], failing: Bool)>(([], false))
    var events: [ActivityEvent] { state.withLock { $0.events } }
    func fail(_ failing: Bool) { state.withLock { $0.failing = failing } }
    func publish(_ event: ActivityEvent) throws {
        try state.withLock {
            if $0.failing { throw ContentError(field: "kafka", problem: "not acknowledged") }
            $0.events.append(event)
        }
    }
}

extension Islet_Content_V1_ActivityEventRequest {
    func changing(_ change: (inout Self) -> Void) -> Self {
        var copy = self
        change(&copy)
        return copy
    }
}

private func fields(_ members: [String: Google_Protobuf_Value]) -> Google_Protobuf_Struct { .with { $0.fields = members } }

@Suite("ActivityService over gRPC, through a real server", .timeLimit(.minutes(1)))
struct ActivityGRPCTests {
    @Test("Start/Update/End publish the event and answer with the ids of its requests; invalid calls name the field; Kafka down is UNAVAILABLE")
    func api() async throws {
        try await Self.withService { activities, published, clock in
            try await Self.exercise(activities, published: published, clock: clock)
        }
    }

    /// The service on a real server, publishing to `published`, on a manual clock.
    static func withService(
        _ body: (Islet_Content_V1_ActivityService.Client<HTTP2ClientTransport.Posix>, RecordingEvents, ManualClock) async throws -> Void
    ) async throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        let published = RecordingEvents()
        let api = ActivityGRPCService(engine: engine) { try published.publish($0) }
        try await withGRPCServer([api]) { client in
            try await body(Islet_Content_V1_ActivityService.Client(wrapping: client), published, clock)
        }
    }

    /// Each update refused as INVALID_ARGUMENT, its message naming the member.
    static func expectRefused(
        _ refusals: [(Islet_Content_V1_ActivityEventRequest, String)], by activities: Islet_Content_V1_ActivityService.Client<HTTP2ClientTransport.Posix>
    ) async {
        for (request, field) in refusals {
            await #expect {
                _ = try await activities.update(request)
            } throws: { error in
                guard let error = error as? RPCError else { return false }
                return error.code == .invalidArgument && error.message.hasPrefix(field + ":")
            }
        }
    }

    static func exercise(
        _ activities: Islet_Content_V1_ActivityService.Client<HTTP2ClientTransport.Posix>, published: RecordingEvents, clock: ManualClock
    ) async throws {
        var update = Islet_Content_V1_ActivityEventRequest.with {
            $0.eventID = "ev-1"
            $0.activityID = "order-42"
            $0.attributesType = "DeliveryAttributes"
            $0.urgency = "important"
            $0.sequence = 1
            $0.fields = fields([
                "status": .init(stringValue: "out_for_delivery"), "orderId": .init(stringValue: "42"),
                "progress": .init(numberValue: 40), "courier": .init(structValue: fields(["name": .init(stringValue: "Ana")])),
            ])
        }
        let reply = try await activities.update(update)
        #expect(reply.eventID == "ev-1")
        #expect(reply.requestIds == [RequestIds.content(bundleId: "com.example.food", activityId: "order-42", eventId: "ev-1")])
        let event = try #require(published.events.last)
        #expect(event.kind == .update && event.sequence == 1 && event.urgency == .important)
        #expect(event.fields["progress"] == .integer(40), "whole numbers arrive as integers")
        #expect(event.fields["courier"]?["name"] == .string("Ana"))
        #expect(event.occurredAt == clock.date)

        // An end whose final state alerts: the alerting update first, then the end.
        update.eventID = "ev-2"
        update.sequence = 2
        update.fields.fields["status"] = .init(stringValue: "delivered")
        let end = try await activities.end(update)
        #expect(end.requestIds == [
            RequestIds.alertBeforeEnd(bundleId: "com.example.food", activityId: "order-42", eventId: "ev-2"),
            RequestIds.content(bundleId: "com.example.food", activityId: "order-42", eventId: "ev-2"),
        ])
        #expect(published.events.map(\.kind) == [.update, .end])

        // Refused, naming the field; nothing published.
        let refusals: [(Islet_Content_V1_ActivityEventRequest, String)] = [
            (update.changing { $0.attributesType = "PizzaAttributes" }, "attributesType"),
            (update.changing { $0.fields.fields["progress"] = .init(stringValue: "far") }, "fields.progress"),
            (update.changing { $0.activityID = "" }, "activity_id"),
            (update.changing { $0.activityID = "a:b" }, "activityId"),
            (update.changing { $0.urgency = "whenever" }, "urgency"),
            (update.changing { $0.sequence = -1 }, "sequence"),
            (update.changing { $0.startTarget = .with { $0.bundleID = "com.example.food"; $0.deviceID = "d1" } }, "start_target"),
        ]
        await Self.expectRefused(refusals, by: activities)
        await #expect {
            _ = try await activities.start(update.changing {
                $0.startTarget = .with { $0.bundleID = "com.example.food"; $0.deviceID = "d1"; $0.environment = "staging" }
            })
        } throws: { ($0 as? RPCError)?.message.hasPrefix("start_target.environment:") == true }
        #expect(published.events.count == 2)

        // Kafka does not acknowledge: UNAVAILABLE, retry with the same event id.
        published.fail(true)
        await #expect { _ = try await activities.update(update.changing { $0.eventID = "ev-3"; $0.sequence = 3 }) } throws: {
            ($0 as? RPCError)?.code == .unavailable
        }
        published.fail(false)
        let limit = try await activities.listStaleActivities(.with { $0.limit = 10 })
        #expect(limit.activities.isEmpty)
        await #expect { _ = try await activities.listStaleActivities(.with { $0.limit = 5_000 }) } throws: {
            ($0 as? RPCError)?.code == .invalidArgument
        }
    }

    @Test("an event's presentation is published with it; a member that breaks Apple's rules is INVALID_ARGUMENT naming it")
    func presentation() async throws {
        try await Self.withService { activities, published, clock in
            let update = Islet_Content_V1_ActivityEventRequest.with {
                $0.eventID = "ev-1"
                $0.activityID = "order-7"
                $0.attributesType = "DeliveryAttributes"
                $0.sequence = 1
                $0.fields = fields(["status": .init(stringValue: "out_for_delivery"), "orderId": .init(stringValue: "7")])
            }
            _ = try await activities.update(update)
            let end = update.changing {
                $0.eventID = "ev-2"
                $0.sequence = 2
                $0.fields.fields["status"] = .init(stringValue: "delivered")
                $0.presentation = .with {
                    $0.immediate = true
                    $0.relevanceScore = 80
                    $0.alert = .with { $0.title = "Delivered"; $0.body = "Enjoy your meal" }
                }
            }
            _ = try await activities.end(end)
            let event = try #require(published.events.last)
            #expect(event.kind == .end)
            #expect(event.presentation == EventPresentation(dismissal: .immediate, relevanceScore: 80, alert: .init(title: "Delivered", body: "Enjoy your meal")))
            #expect(published.events.first?.presentation == nil, "no presentation given: none, the template's")

            // A dismissal at a time arrives as that time.
            let at = clock.date.addingTimeInterval(600)
            _ = try await activities.end(end.changing {
                $0.activityID = "order-8"
                $0.presentation = .with { $0.dismissAt = Google_Protobuf_Timestamp(date: at); $0.staleAfterSeconds = 60 }
            })
            #expect(published.events.last?.presentation == EventPresentation(dismissal: .at(at), staleAfterSeconds: 60))

            // Refused, naming the member; nothing published. A given 0 is a value, not "not given".
            let refusals: [(Islet_Content_V1_ActivityEventRequest, String)] = [
                (update.changing { $0.sequence = 3; $0.presentation = .with { $0.immediate = true } }, "presentation.dismissal"),
                (update.changing { $0.sequence = 3; $0.presentation = .with { $0.relevanceScore = 500 } }, "presentation.relevanceScore"),
                (update.changing { $0.sequence = 3; $0.presentation = .with { $0.staleAfterSeconds = 0 } }, "presentation.staleAfterSeconds"),
                (update.changing { $0.sequence = 3; $0.presentation = .with { $0.alert = .with { $0.body = "no title" } } }, "presentation.alert.title"),
            ]
            let count = published.events.count
            await Self.expectRefused(refusals, by: activities)
            for dismissal in [Islet_Content_V1_EventPresentation.OneOf_Dismissal.immediate(false), .dismissAt(Google_Protobuf_Timestamp(date: clock.date.addingTimeInterval(5 * 3_600)))] {
                await #expect {
                    _ = try await activities.end(end.changing { $0.activityID = "order-9"; $0.presentation.dismissal = dismissal })
                } throws: { ($0 as? RPCError)?.message.hasPrefix("presentation.dismissal:") == true }
            }
            #expect(published.events.count == count)
        }
    }

    @Test("an alert's translations and loc keys, and an update's or end's `at`, are published as the topic carries them; refusals name the member")
    func localizedAlertAndAt() async throws {
        try await Self.withService { activities, published, clock in
            let at = clock.date.addingTimeInterval(600)
            let update = Islet_Content_V1_ActivityEventRequest.with {
                $0.eventID = "ev-1"
                $0.activityID = "order-7"
                $0.attributesType = "DeliveryAttributes"
                $0.urgency = "important"
                $0.sequence = 1
                $0.fields = fields(["status": .init(stringValue: "out_for_delivery"), "orderId": .init(stringValue: "7")])
                $0.at = Google_Protobuf_Timestamp(date: at)
                $0.presentation = .with {
                    $0.alert = .with {
                        $0.titleLocKey = "ON_THE_WAY"
                        $0.titleLocArgs = ["Ana"]
                        $0.body = "Ana is bringing your order"
                        $0.translations = [
                            "zh-Hans": .with { $0.title = "配送中"; $0.body = "Ana 正在为您送货" },
                            "de": .with { $0.title = "Unterwegs" },
                        ]
                    }
                }
            }
            #expect(try await activities.update(update).requestIds.isEmpty, "a step: its requests are made at its time")
            let event = try #require(published.events.last)
            #expect(event.at == at)
            #expect(
                event.presentation?.alert
                    == EventPresentation.Alert(
                        body: "Ana is bringing your order", titleLocKey: "ON_THE_WAY", titleLocArgs: ["Ana"],
                        translations: ["zh-Hans": .init(title: "配送中", body: "Ana 正在为您送货"), "de": .init(title: "Unterwegs")]))
            _ = try await activities.end(update.changing {
                $0.eventID = "ev-2"
                $0.sequence = 2
                $0.fields.fields["status"] = .init(stringValue: "delivered")
                $0.clearPresentation()
            })
            #expect(published.events.last?.kind == .end)
            #expect(published.events.last?.at == at)
            _ = try await activities.update(update.changing { $0.activityID = "order-8"; $0.clearAt(); $0.clearPresentation() })
            #expect(published.events.last?.at == nil, "no at: at once")

            let count = published.events.count
            let refusals: [(Islet_Content_V1_ActivityEventRequest, String)] = [
                (update.changing { $0.activityID = "order-9"; $0.presentation.alert.title = "On the way" }, "presentation.alert.titleLocKey"),
                (update.changing { $0.activityID = "order-9"; $0.presentation.alert.translations["zh-hans"] = .with { $0.title = "x" } },
                 "presentation.alert.translations.zh-hans"),
                (update.changing { $0.activityID = "order-9"; $0.presentation.alert.translations["de"] = .with { $0.body = "no title" } },
                 "presentation.alert.translations.de.title"),
                (update.changing { $0.activityID = "order-9"; $0.presentation.alert.bodyLocArgs = ["x"] }, "presentation.alert.bodyLocArgs"),
                (update.changing { $0.activityID = "order-9"; $0.at = Google_Protobuf_Timestamp(date: clock.date.addingTimeInterval(9 * 3_600)) }, "at"),
            ]
            await Self.expectRefused(refusals, by: activities)
            await #expect {
                _ = try await activities.start(update.changing { $0.activityID = "order-9"; $0.clearPresentation() })
            } throws: { ($0 as? RPCError)?.message.hasPrefix("at:") == true }
            #expect(published.events.count == count)
        }
    }

    @Test("stale activities are listed, most stale first")
    func staleList() async throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        for (index, id) in ["a1", "a2"].enumerated() {
            let request = ActivityEvent(
                eventId: "e", activityId: id, kind: .update, attributesType: "DeliveryAttributes",
                fields: ["status": .string("arriving"), "orderId": .string("1")], urgency: .routine, occurredAt: clock.date, sequence: 1)
            guard case .send(let prepared) = try engine.prepare(request) else { Issue.record("not sent"); return }
            engine.commit(prepared)
            clock.advance(Double(index + 1) * 10)
        }
        clock.advance(200)
        let service = ActivityGRPCService(engine: engine) { _ in }
        let list = try await service.listStaleActivities(request: .init(), context: .init(descriptor: .init(fullyQualifiedService: "s", method: "m"), remotePeer: "", localPeer: "", cancellation: .init()))
        #expect(list.activities.map(\.activityID) == ["a1", "a2"])
        #expect(list.activities.allSatisfy { $0.freshness == "staleRecoverable" && $0.contentSequence == 1 })
    }
}
