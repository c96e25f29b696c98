import Foundation

/// The body of content-service's `POST /v1/activities/{activityId}/events` (docs/http-api.md,
/// docs/openapi.yaml): an ``ActivityEvent``'s fields, the activity id in the path, the app
/// required. The server decodes it; the `islet` CLI and the demo encode it.
public struct ActivityEventBody: Codable, Sendable, Equatable {
    public var kind: ActivityEventKind
    public var bundleId: String
    public var attributesType: String
    public var fields: [String: JSONValue]?
    public var urgency: Urgency?
    /// Default: when the server takes it.
    public var occurredAt: Date?
    public var sequence: Int64
    public var startTarget: ActivityEvent.PushToStartTarget?
    public var attributes: [String: JSONValue]?
    public var source: String?
    /// Default: derived from the `Idempotency-Key`, else a new one.
    public var eventId: String?
    /// When given, the path's.
    public var activityId: String?
    /// How this event is presented where it differs from its template (``EventPresentation``).
    public var presentation: EventPresentation?
    /// When the phone should show it, if later than now (``ActivityEvent/at``).
    public var at: Date?

    /// `event` as a body; `occurredAt` and `eventId` left to the server when `keepingTime` and
    /// `keepingEventId` are false.
    public init(_ event: ActivityEvent, bundleId: String, keepingEventId: Bool = true, keepingTime: Bool = true) {
        kind = event.kind
        self.bundleId = bundleId
        attributesType = event.attributesType
        fields = event.fields
        urgency = event.urgency
        occurredAt = keepingTime ? event.occurredAt : nil
        sequence = event.sequence
        startTarget = event.startTarget
        attributes = event.attributes
        source = event.source
        eventId = keepingEventId ? event.eventId : nil
        presentation = event.presentation
        at = event.at
    }
}
