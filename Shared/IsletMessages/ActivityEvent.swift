import Foundation

/// A change in a backend's domain that a live activity should show, on `islet.activity-events.v1`.
///
/// Backends say what happened ("order 42 is out for delivery, ETA 12 minutes"); content-service
/// turns it into the APNs payload. Delivery is at-least-once and per-activity order matters, so
/// every event has an `eventId` (duplicates are dropped) and a per-activity `sequence` (an event
/// not newer than the last one applied is ignored). Written by backends, directly or through
/// content-service's gRPC API.
public struct ActivityEvent: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.activityEvents

    /// Where to start an activity remotely (push-to-start): one device, or every device of a user.
    public struct PushToStartTarget: Codable, Sendable, Hashable {
        /// The app to start the activity in.
        public var app: AppTarget
        /// The app's identifier for the device, as registered with the push-to-start token.
        /// Exactly one of `deviceId` and `userId`.
        public var deviceId: String?
        /// The user (as the app's JWT names them, the push-to-start tokens' `userId`): the activity
        /// starts on each of their devices that registered a push-to-start token for the event's
        /// attributes type in this app. Exactly one of `deviceId` and `userId`.
        public var userId: String?

        public init(app: AppTarget, deviceId: String) {
            self.app = app
            self.deviceId = deviceId
        }

        public init(app: AppTarget, userId: String) {
            self.app = app
            self.userId = userId
        }

        init(app: AppTarget, deviceId: String?, userId: String?) {
            (self.app, self.deviceId, self.userId) = (app, deviceId, userId)
        }

        /// The most bytes of a `userId` (as token-registry takes it from a JWT's `sub`).
        public static let maximumUserIdBytes = 255

        func validate() throws(MessageValidationError) {
            switch (deviceId, userId) {
            case (nil, nil), (.some, .some):
                throw MessageValidationError(field: "startTarget.deviceId", problem: "exactly one of deviceId and userId must be set")
            case (.some, nil):
                return
            case (nil, let userId?):
                guard !userId.isEmpty, userId.utf8.count <= Self.maximumUserIdBytes else {
                    throw MessageValidationError(field: "startTarget.userId", problem: "must be 1-\(Self.maximumUserIdBytes) bytes")
                }
            }
        }
    }

    public var schemaVersion: Int
    /// The producer's id for this event, unique per producer; a repeated id is a duplicate.
    public var eventId: String
    /// The backend's id for the activity, e.g. `order-42`. Never contains `:` or `/`.
    public var activityId: String
    /// The app the activity lives in (`com.example.food`): activity ids are scoped per app, and two
    /// apps may use the same one. Optional for events written before it existed: without it, the
    /// app is the push-to-start target's, else the only app that has `activityId` live, and an
    /// event whose id is live in several apps is refused.
    public var bundleId: String?
    /// Start, update or end the activity.
    public var kind: ActivityEventKind
    /// The Swift type name of the widget's `ActivityAttributes`, e.g. `DeliveryAttributes`.
    public var attributesType: String
    /// The domain state, in the backend's own terms (`{"status": "out_for_delivery", "etaMinutes": 12}`).
    /// content-service maps it onto the attributes type's content-state.
    public var fields: [String: JSONValue]
    /// How much the user cares: decides priority, alerting and whether the update may wait for budget.
    public var urgency: Urgency
    /// When the change happened in the backend.
    public var occurredAt: Date
    /// Increases with every event of the activity; an event whose sequence is not above the last
    /// applied one is ignored (out of order or duplicate). Starts at 0 or more.
    public var sequence: Int64
    /// For a `start` through push-to-start: the app and device to start it on. `nil` when the app
    /// started the activity itself (the event then only sets its content).
    public var startTarget: PushToStartTarget?
    /// The static `ActivityAttributes` values for a push-to-start (`{"orderId": "42"}`).
    public var attributes: [String: JSONValue]?
    /// The name of the backend that produced the event, for tracing.
    public var source: String?
    /// How this event is presented where it differs from its template (dismissal, relevance,
    /// stale time, sound, alert texts). Absent in events written before it existed (additive).
    public var presentation: EventPresentation?
    /// When the phone should show this event, when that is later than its arrival: a scheduled
    /// step ("at 12:41 show arrived"). content-service keeps it and sends it then; a newer event
    /// (a sequence at or above its own), the activity's end, or another step with the same
    /// sequence (moved or changed) supersedes it. Only with kind update or end; at most
    /// ``maximumScheduleAhead`` ahead. Absent: at once (events written before it existed too).
    public var at: Date?

    /// How far ahead an event may be scheduled (``at``): a Live Activity shows updates for 8 hours.
    public static let maximumScheduleAhead: TimeInterval = 8 * 3_600

    public init(
        eventId: String, activityId: String, kind: ActivityEventKind, attributesType: String, fields: [String: JSONValue],
        urgency: Urgency, occurredAt: Date, sequence: Int64, startTarget: PushToStartTarget? = nil,
        attributes: [String: JSONValue]? = nil, source: String? = nil, bundleId: String? = nil, presentation: EventPresentation? = nil,
        at: Date? = nil, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.presentation = presentation
        self.at = at
        self.schemaVersion = schemaVersion
        self.eventId = eventId
        self.activityId = activityId
        self.bundleId = bundleId
        self.kind = kind
        self.attributesType = attributesType
        self.fields = fields
        self.urgency = urgency
        self.occurredAt = occurredAt
        self.sequence = sequence
        self.startTarget = startTarget
        self.attributes = attributes
        self.source = source
    }

    /// The activity id (the app is in the value: a backend keys its events as it always did, and
    /// the id alone decides the partition either way).
    public var key: String? { MessageKey.activity(activityId) }

    public func validate() throws(MessageValidationError) {
        try kind.requireKnown(field: "kind")
        try urgency.requireKnown(field: "urgency")
        guard !activityId.isEmpty else {
            throw MessageValidationError(field: "activityId", problem: "must not be empty")
        }
        try MessageKey.requireActivityId(activityId)
        if let bundleId {
            try MessageKey.requireBundleId(bundleId, field: "bundleId")
            if let target = startTarget, target.app.bundleId != bundleId {
                throw MessageValidationError(
                    field: "startTarget.app.bundleId", problem: "must be the event's bundleId (\(bundleId)), is \(target.app.bundleId)")
            }
        }
        guard sequence >= 0 else {
            throw MessageValidationError(field: "sequence", problem: "must not be negative (is \(sequence))")
        }
        if startTarget != nil, kind != .start {
            throw MessageValidationError(field: "startTarget", problem: "only allowed with kind start (kind is \(kind))")
        }
        try startTarget?.validate()
        try presentation?.validate(kind: kind, occurredAt: occurredAt)
        if let at {
            guard kind != .start else {
                throw MessageValidationError(field: "at", problem: "a start cannot be scheduled (only updates and ends): start it when it is to appear")
            }
            guard at.timeIntervalSince(occurredAt) <= Self.maximumScheduleAhead else {
                throw MessageValidationError(field: "at", problem: "must be at most 8 hours after occurredAt (a Live Activity shows updates for 8 hours)")
            }
        }
    }
}
