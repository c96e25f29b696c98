import Foundation
import GRPCCore
import IsletKafka
import IsletMessages
import IsletProtos
import SwiftProtobuf

/// The backends' gRPC API (`islet.content.v1.ActivityService`, Shared/IsletProtos/activity_service.proto):
/// the same domain events as `islet.activity-events.v1`, one call each.
///
/// A call is checked against its template here (INVALID_ARGUMENT naming the field, nothing
/// written), then published to `islet.activity-events.v1` and answered once Kafka acknowledged it,
/// with the ids of the push requests it becomes (``EventIntake``, which the HTTP API shares).
public struct ActivityGRPCService: Islet_Content_V1_ActivityService.SimpleServiceProtocol {
    let engine: ContentEngine
    let intake: EventIntake

    public init(engine: ContentEngine, isReady: @escaping @Sendable () -> Bool = { true }, publish: @escaping EventIntake.Publish) {
        self.init(intake: EventIntake(engine: engine, isReady: isReady, publish: publish))
    }

    public init(intake: EventIntake) {
        self.engine = intake.engine
        self.intake = intake
    }

    public func start(request: Islet_Content_V1_ActivityEventRequest, context: ServerContext) async throws -> Islet_Content_V1_ActivityEventReply {
        try await handle(request, kind: .start)
    }

    public func update(request: Islet_Content_V1_ActivityEventRequest, context: ServerContext) async throws -> Islet_Content_V1_ActivityEventReply {
        try await handle(request, kind: .update)
    }

    public func end(request: Islet_Content_V1_ActivityEventRequest, context: ServerContext) async throws -> Islet_Content_V1_ActivityEventReply {
        try await handle(request, kind: .end)
    }

    public func listStaleActivities(
        request: Islet_Content_V1_ListStaleActivitiesRequest, context: ServerContext
    ) async throws -> Islet_Content_V1_ListStaleActivitiesResponse {
        guard (0...1_000).contains(request.limit) else {
            throw RPCError(code: .invalidArgument, message: "limit: must be between 1 and 1000 (0 means 1000)")
        }
        return .with {
            $0.activities = engine.staleActivities(limit: request.limit == 0 ? 1_000 : Int(request.limit)).map { stale in
                .with {
                    $0.activityID = stale.activityId
                    $0.bundleID = stale.bundleId
                    $0.attributesType = stale.attributesType
                    $0.freshness = stale.freshness.rawValue
                    $0.staleSince = Google_Protobuf_Timestamp(date: stale.staleSince)
                    $0.contentSequence = stale.contentSequence
                    $0.resends = Int32(clamping: stale.resends)
                }
            }
        }
    }

    static let starting = RPCError(code: .unavailable, message: "starting: the token table and activity memory are being rebuilt")

    private func handle(_ request: Islet_Content_V1_ActivityEventRequest, kind: ActivityEventKind) async throws -> Islet_Content_V1_ActivityEventReply {
        guard intake.isReady() else { throw Self.starting }
        let event = try Self.event(from: request, kind: kind, now: engine.clock.date)
        let requestIds: [String]
        do {
            requestIds = try await intake.accept(event)
        } catch {
            switch error {
            case .starting: throw Self.starting
            case .invalid(let field, let problem): throw RPCError(code: .invalidArgument, message: "\(field): \(problem)")
            case .notYet(let field, let problem): throw RPCError(code: .unavailable, message: "\(field): \(problem)")
            case .notAcknowledged(let reason):
                throw RPCError(code: .unavailable, message: "the event was not acknowledged by Kafka; retry the call (same event_id): \(reason)")
            }
        }
        return .with {
            $0.eventID = event.eventId
            $0.requestIds = requestIds
        }
    }

    /// The event a call describes; INVALID_ARGUMENT naming the field when it cannot be one.
    static func event(from request: Islet_Content_V1_ActivityEventRequest, kind: ActivityEventKind, now: Date) throws(RPCError) -> ActivityEvent {
        func invalid(_ field: String, _ problem: String) -> RPCError { RPCError(code: .invalidArgument, message: "\(field): \(problem)") }
        let eventId = request.eventID.isEmpty ? UUID().uuidString.lowercased() : request.eventID
        guard eventId.utf8.count <= 128 else { throw invalid("event_id", "must be at most 128 bytes") }
        guard !request.activityID.isEmpty, request.activityID.utf8.count <= 128 else { throw invalid("activity_id", "must be 1-128 bytes") }
        guard !request.attributesType.isEmpty else { throw invalid("attributes_type", "is required") }
        let urgency = request.urgency.isEmpty ? Urgency.routine : Urgency(rawValue: request.urgency)
        guard Urgency.knownValues.contains(urgency) else { throw invalid("urgency", "must be routine, important or critical") }
        var target: ActivityEvent.PushToStartTarget?
        if request.hasStartTarget {
            guard kind == .start else { throw invalid("start_target", "only allowed in Start") }
            let given = request.startTarget
            guard !given.bundleID.isEmpty else { throw invalid("start_target.bundle_id", "is required") }
            guard !given.deviceID.isEmpty, !given.deviceID.contains(":") else { throw invalid("start_target.device_id", "is required, without ':'") }
            let environment = given.environment.isEmpty ? APNsEnvironment.production : APNsEnvironment(rawValue: given.environment)
            guard APNsEnvironment.knownValues.contains(environment) else { throw invalid("start_target.environment", "must be production or sandbox") }
            target = .init(app: AppTarget(bundleId: given.bundleID, environment: environment), deviceId: given.deviceID)
        }
        if request.hasAttributes, kind != .start { throw invalid("attributes", "only allowed in Start") }
        var presentation: EventPresentation?
        if request.hasPresentation {
            let given = request.presentation
            var dismissal: EventPresentation.Dismissal?
            switch given.dismissal {
            case nil: dismissal = nil
            case .immediate(let immediate)?:
                guard immediate else { throw invalid("presentation.dismissal", "immediate must be true when set (leave dismissal unset for the policy's)") }
                dismissal = .immediate
            case .dismissAt(let time)?: dismissal = .at(time.date)
            }
            presentation = EventPresentation(
                dismissal: dismissal, relevanceScore: given.hasRelevanceScore ? given.relevanceScore : nil,
                staleAfterSeconds: given.hasStaleAfterSeconds ? Int(given.staleAfterSeconds) : nil, sound: given.sound.isEmpty ? nil : given.sound,
                alert: given.hasAlert ? alert(given.alert) : nil)
        }
        let event = ActivityEvent(
            eventId: eventId, activityId: request.activityID, kind: kind, attributesType: request.attributesType,
            fields: request.fields.fields.mapValues(JSONValue.init(protobuf:)), urgency: urgency,
            occurredAt: request.hasOccurredAt ? request.occurredAt.date : now, sequence: request.sequence, startTarget: target,
            attributes: request.hasAttributes ? request.attributes.fields.mapValues(JSONValue.init(protobuf:)) : nil,
            source: request.source.isEmpty ? nil : request.source, bundleId: request.bundleID.isEmpty ? nil : request.bundleID,
            presentation: presentation, at: request.hasAt ? request.at.date : nil)
        do {
            try event.validate()
        } catch {
            throw invalid(error.field, error.problem)
        }
        return event
    }

    /// An alert as the topic carries it: an empty string or list is not given.
    static func alert(_ given: Islet_Content_V1_EventAlert) -> EventPresentation.Alert {
        func nonEmpty(_ text: String) -> String? { text.isEmpty ? nil : text }
        func nonEmpty(_ list: [String]) -> [String]? { list.isEmpty ? nil : list }
        return EventPresentation.Alert(
            title: nonEmpty(given.title), body: nonEmpty(given.body), titleLocKey: nonEmpty(given.titleLocKey),
            titleLocArgs: nonEmpty(given.titleLocArgs), bodyLocKey: nonEmpty(given.bodyLocKey), bodyLocArgs: nonEmpty(given.bodyLocArgs),
            translations: given.translations.isEmpty
                ? nil : given.translations.mapValues { EventPresentation.Alert.Translation(title: $0.title, body: nonEmpty($0.body)) })
    }
}

extension JSONValue {
    /// A `google.protobuf.Value` as JSON; whole numbers (protobuf has only doubles) as integers.
    init(protobuf value: Google_Protobuf_Value) {
        switch value.kind {
        case .nullValue?, nil: self = .null
        case .boolValue(let b)?: self = .bool(b)
        case .stringValue(let s)?: self = .string(s)
        case .numberValue(let n)?:
            self = n.rounded() == n && abs(n) <= 9_007_199_254_740_992 ? .integer(Int64(n)) : .number(n)
        case .structValue(let s)?: self = .object(s.fields.mapValues(JSONValue.init(protobuf:)))
        case .listValue(let l)?: self = .array(l.values.map(JSONValue.init(protobuf:)))
        }
    }
}
