import Foundation

/// One complete APNs request to send, on `islet.push-requests.v1`.
///
/// content-service builds it (payload, budgeted to 4 KB; requested priority; whether it may be
/// coalesced); apns-dispatcher sends it to the activity's current token and answers with exactly
/// one ``PushOutcome`` carrying the same `requestId`. It addresses exactly one of a running
/// activity (`activityId`), a push-to-start token (`pushToStartKey`) and a device's widgets
/// (`widgetKey`, iOS 26: `apns-push-type: widgets`).
public struct PushRequest: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.pushRequests

    /// The largest APNs request body a Live Activity push may have, in UTF-8 bytes.
    public static let maximumPayloadBytes = 4096

    public var schemaVersion: Int
    /// A UUID chosen by content-service, sent as `apns-id`, and repeated in the outcome.
    public var requestId: String
    /// The activity to update or end. Exactly one of `activityId`, `pushToStartKey` and `widgetKey` is set.
    public var activityId: String?
    /// The push-to-start key (`pts:<bundleId>:<deviceId>:<attributesType>`) of the token to start an
    /// activity with. Exactly one of `activityId`, `pushToStartKey` and `widgetKey` is set.
    public var pushToStartKey: String?
    /// The widget key (`wgt:<bundleId>:<deviceId>:<kind>`) of a device's widget token: a WidgetKit
    /// push (`{"aps":{"content-changed":true}}`, priority 5, topic `<bundleId>.push-type.widgets`)
    /// that has the widgets of that kind reload their timeline. `event` is `update`,
    /// `attributesType` the widget kind, `sourceActivityId` the activity whose event refreshed it.
    /// Absent otherwise, and in requests written before it existed (additive; a dispatcher that
    /// does not know it rejects such a request: upgrade apns-dispatcher first).
    public var widgetKey: String?
    /// Start, update or end: the payload's `aps.event`.
    public var event: ActivityEventKind
    /// The app (`apns-topic`) and APNs environment to send to.
    public var app: AppTarget
    /// The Swift type name of the widget's `ActivityAttributes`.
    public var attributesType: String
    /// The exact APNs request body, as JSON text: the bytes sent are the bytes budgeted. At most
    /// ``maximumPayloadBytes`` UTF-8 bytes.
    public var payload: String
    /// The requested `apns-priority`, 5 (opportunistic, cheap) or 10 (immediate, spends budget).
    /// The dispatcher may downgrade 10 to 5; the outcome says which was used.
    public var priority: Int
    /// The urgency of the event behind it: `critical` waits for budget instead of being downgraded.
    public var urgency: Urgency
    /// Whether a newer update for the same activity may replace this one while it waits (coalescing).
    /// content-service sets it only for updates: a `start` or an `end` is never dropped.
    public var supersedable: Bool
    /// Whether the payload has an `alert` (lights the screen, plays a sound).
    public var alerting: Bool
    /// The payload's `aps.timestamp`, epoch seconds, fixed when the request was made: iOS ignores
    /// a push whose timestamp is older than the content it shows.
    public var apnsTimestamp: Int64
    /// The sequence of the content this payload carries (from the activity event), increasing per activity.
    public var contentSequence: Int64
    /// The payload's `aps.stale-date`: when iOS marks the content out of date.
    public var staleDate: Date?
    /// `apns-expiration`: until when APNs keeps retrying delivery. `nil` means 0: one attempt, no storage.
    public var expiration: Date?
    /// When content-service made the request.
    public var createdAt: Date
    /// The ``ActivityEvent/eventId`` this request was built from, if any (not for freshness resends).
    public var sourceEventId: String?
    /// The backend's activity id (``ActivityEvent/activityId``) the content belongs to. Set on every
    /// request content-service makes, push-to-start included (whose `activityId` is absent): it
    /// rebuilds its per-activity memory from these after a restart.
    public var sourceActivityId: String?
    /// The template state of the content (`out_for_delivery`): alerts fire on a change of state.
    public var state: String?
    /// Set for a broadcast (iOS 18): the request goes to the activity's broadcast channel — one
    /// push for every phone subscribed — not to a token. The channel is made on the activity's
    /// first broadcast with this `message-storage-policy` (0 no message stored, 1 the most recent
    /// stored). A broadcast updates or ends; it never starts (`activityId` is set).
    public var channelStoragePolicy: Int?
    /// Set on a push-to-start that starts the activity on its broadcast channel (iOS 18): the
    /// channel's id, which the payload names too (`aps.input-push-channel`). The phone's new
    /// activity is then updated by the channel's broadcasts, not by a token of its own. The
    /// activity's memory in content-service follows none of these (its content is the channel's),
    /// and the dispatcher repeats the id in the outcome. Absent otherwise, and in requests written
    /// before it existed (additive).
    public var channelId: String?
    /// The registration time (`registeredAt`) of the token record the content was made for, when
    /// content-service had one for the request's key. apns-dispatcher sends to no older record: it
    /// waits until its token table holds this registration or a newer one (its table may lag the
    /// topic). Absent in requests written before it existed, and when there was no record (additive).
    public var tokenRegisteredAt: Date?
    /// Set on a copy of an activity's request for one more of its devices (the token record
    /// `<bundleId>/<activityId>/<deviceId>`, ``TokenRecord/deviceKeyed``): its key is that device's,
    /// so the dispatcher queues, budgets and coalesces it apart from the activity's own. Its
    /// `requestId` is derived from the activity's request's. Absent on the activity's own request
    /// and on requests written before it existed (additive).
    public var deviceId: String?
    /// Set on each push-to-start of an activity started on every device of a user
    /// (``ActivityEvent/PushToStartTarget/userId``): the request id of the one made for the first
    /// device, which carries it too. A request whose `startGroup` is not its own id is the start
    /// for one more device of that user, written before the first device's: content-service's
    /// memory of the activity follows the first device's only. Absent otherwise (additive).
    public var startGroup: String?

    public init(
        requestId: String, activityId: String? = nil, pushToStartKey: String? = nil, event: ActivityEventKind, app: AppTarget,
        attributesType: String, payload: String, priority: Int, urgency: Urgency, supersedable: Bool, alerting: Bool,
        apnsTimestamp: Int64, contentSequence: Int64, staleDate: Date? = nil, expiration: Date? = nil, createdAt: Date,
        sourceEventId: String? = nil, sourceActivityId: String? = nil, state: String? = nil, channelStoragePolicy: Int? = nil,
        tokenRegisteredAt: Date? = nil, deviceId: String? = nil, startGroup: String? = nil, widgetKey: String? = nil, channelId: String? = nil,
        schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.requestId = requestId
        self.activityId = activityId
        self.pushToStartKey = pushToStartKey
        self.event = event
        self.app = app
        self.attributesType = attributesType
        self.payload = payload
        self.priority = priority
        self.urgency = urgency
        self.supersedable = supersedable
        self.alerting = alerting
        self.apnsTimestamp = apnsTimestamp
        self.contentSequence = contentSequence
        self.staleDate = staleDate
        self.expiration = expiration
        self.createdAt = createdAt
        self.sourceEventId = sourceEventId
        self.sourceActivityId = sourceActivityId
        self.state = state
        self.channelStoragePolicy = channelStoragePolicy
        self.tokenRegisteredAt = tokenRegisteredAt
        self.deviceId = deviceId
        self.startGroup = startGroup
        self.widgetKey = widgetKey
        self.channelId = channelId
    }

    /// The body of every widget push: WidgetKit reloads the widgets' timelines; the data comes from
    /// the app's own server.
    public static let widgetPayload = #"{"aps":{"content-changed":true}}"#

    /// Whether it is a WidgetKit push (``widgetKey``).
    public var isWidget: Bool { widgetKey != nil }

    /// The largest body of a broadcast, in UTF-8 bytes (APNs allows 5 KB there).
    public static let maximumBroadcastPayloadBytes = 5_120

    /// Whether it goes to the activity's broadcast channel.
    public var isBroadcast: Bool { channelStoragePolicy != nil }

    /// The activity of its app (`<bundleId>/<activityId>`; one more device's copy:
    /// `<bundleId>/<activityId>/<deviceId>`), or the push-to-start key for a push-to-start request.
    public var key: String? {
        guard let activityId else { return pushToStartKey ?? widgetKey }
        if let deviceId { return MessageKey.device(bundleId: app.bundleId, activityId: activityId, deviceId: deviceId) }
        return MessageKey.activity(bundleId: app.bundleId, activityId: activityId)
    }

    /// Whether it is a push-to-start that starts the activity on its broadcast channel (``channelId``).
    public var joinsChannel: Bool { channelId != nil }

    /// Whether it is a copy of an activity's request for one more of its devices (``deviceId``).
    public var isDeviceCopy: Bool { deviceId != nil }

    /// Whether it is the push-to-start for one more device of a user (``startGroup``).
    public var isStartCopy: Bool { startGroup.map { $0 != requestId } ?? false }

    /// The activity whose content this is, of its app (`<bundleId>/<activityId>`): for a
    /// push-to-start, the activity it starts (``sourceActivityId``). `nil` when neither is known.
    public var activityKey: String? {
        (sourceActivityId ?? activityId).map { MessageKey.activity(bundleId: app.bundleId, activityId: $0) }
    }

    public func validate() throws(MessageValidationError) {
        try requireExactlyOneTarget(activityId: activityId, pushToStartKey: pushToStartKey, widgetKey: widgetKey)
        guard priority == 5 || priority == 10 else {
            throw MessageValidationError(field: "priority", problem: "must be 5 or 10 (is \(priority))")
        }
        guard !payload.isEmpty else {
            throw MessageValidationError(field: "payload", problem: "must not be empty")
        }
        let limit = isBroadcast ? Self.maximumBroadcastPayloadBytes : Self.maximumPayloadBytes
        guard payload.utf8.count <= limit else {
            throw MessageValidationError(field: "payload", problem: "is \(payload.utf8.count) bytes, more than \(limit)")
        }
        if let policy = channelStoragePolicy {
            guard policy == 0 || policy == 1 else {
                throw MessageValidationError(field: "channelStoragePolicy", problem: "must be 0 or 1 (is \(policy))")
            }
            guard activityId != nil, event != .start else {
                throw MessageValidationError(field: "channelStoragePolicy", problem: "a broadcast updates or ends an activity: it never starts one")
            }
        }
        if let deviceId {
            guard activityId != nil, !isBroadcast, !deviceId.isEmpty else {
                throw MessageValidationError(field: "deviceId", problem: "a device's copy goes to an activity's device token: never a broadcast or push-to-start")
            }
            try MessageKey.requireDeviceId(deviceId)
        }
        if let startGroup, pushToStartKey == nil || startGroup.isEmpty {
            throw MessageValidationError(field: "startGroup", problem: "only on a push-to-start (is \(startGroup.isEmpty ? "empty" : "on a request to an activity"))")
        }
        try event.requireKnown(field: "event")
        try app.environment.requireKnown(field: "app.environment")
        if let channelId {
            guard pushToStartKey != nil, event == .start, !isBroadcast, !channelId.isEmpty else {
                throw MessageValidationError(field: "channelId", problem: "only on a push-to-start (a start to a push-to-start token), never empty")
            }
            guard Data(base64Encoded: channelId) != nil else {
                throw MessageValidationError(field: "channelId", problem: "must be base64, as APNs makes channel ids")
            }
        }
        guard UUID(uuidString: requestId) != nil else {
            throw MessageValidationError(field: "requestId", problem: "must be a UUID (it is sent as apns-id)")
        }
        if let widgetKey {
            guard let (bundleId, _, kind) = MessageKey.splitWidget(widgetKey), bundleId == app.bundleId, kind == attributesType else {
                throw MessageValidationError(field: "widgetKey", problem: "must be wgt:<app.bundleId>:<deviceId>:<attributesType>")
            }
            guard priority == 5, event == .update, !isBroadcast, deviceId == nil, startGroup == nil, !alerting else {
                throw MessageValidationError(
                    field: "widgetKey", problem: "a widget push is an update at priority 5, without an alert, to one token (not a broadcast or a copy)")
            }
            guard payload == Self.widgetPayload else {
                throw MessageValidationError(field: "payload", problem: "a widget push's body is \(Self.widgetPayload)")
            }
        }
    }
}

/// The rule shared by push requests and outcomes: they address an activity, a push-to-start token
/// or a device's widgets.
func requireExactlyOneTarget(activityId: String?, pushToStartKey: String?, widgetKey: String?) throws(MessageValidationError) {
    if let widgetKey {
        guard activityId == nil, pushToStartKey == nil else {
            throw MessageValidationError(field: "widgetKey", problem: "must be the only target (activityId and pushToStartKey absent)")
        }
        guard MessageKey.splitWidget(widgetKey) != nil else {
            throw MessageValidationError(field: "widgetKey", problem: "must be wgt:<bundleId>:<deviceId>:<kind>")
        }
        return
    }
    switch (activityId, pushToStartKey) {
    case (nil, nil):
        throw MessageValidationError(field: "activityId", problem: "one of activityId and pushToStartKey is required")
    case (.some, .some):
        throw MessageValidationError(field: "pushToStartKey", problem: "must be absent when activityId is set")
    case (let activityId?, nil) where activityId.isEmpty:
        throw MessageValidationError(field: "activityId", problem: "must not be empty")
    case (nil, let pushToStartKey?) where pushToStartKey.isEmpty:
        throw MessageValidationError(field: "pushToStartKey", problem: "must not be empty")
    default:
        break
    }
}
