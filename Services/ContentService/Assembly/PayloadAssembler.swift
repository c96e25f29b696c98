import Foundation
import IsletLinks
import IsletMessages
import Mustache

/// Turns one domain event into the APNs requests for it: the content state for the app version,
/// the layout, signed links, `aps` with timestamp, stale date, relevance, alert, dismissal — within
/// 4 KB, shrinking in a declared order when it is not.
public struct PayloadAssembler: Sendable {
    public let templates: [String: ActivityTemplate]
    public let keyring: LinkKeyring
    public let policy: ContentPolicy

    /// The distinct ranks of each type's droppable texts, lowest first (a translation keeps them).
    private let ranks: [String: [Int]]

    public init(templates: [String: ActivityTemplate], keyring: LinkKeyring, policy: ContentPolicy = ContentPolicy()) {
        self.templates = templates
        self.keyring = keyring
        self.policy = policy
        ranks = templates.compactMapValues { $0.layout.map(Self.ranks(in:)) }
    }

    /// What one event produces.
    public struct Result: Sendable {
        public var requests: [PushRequest]
        /// What had to go to fit 4 KB (`rank 1 texts`), in order.
        public var shrinks: [String]
    }

    /// The requests for `event`, sent to `app` for an app of `appVersion` showing the activity in
    /// `locale` (its template's texts in that language, ``ActivityTemplate/localized(_:)``); updates `memory`.
    /// Throws (nothing is produced) when the event does not fit its template, or cannot fit 4 KB.
    /// Three pure steps: what to send (``plan(_:app:appVersion:locale:memory:now:)``), the payloads of
    /// each shrink step until they fit (``fit(_:images:memory:now:)``), and the requests carrying
    /// them; then what the activity's memory keeps of it.
    /// - Parameter images: thumbnails by image URL (base64 JPEG, best first; ``ThumbnailService``).
    /// - Parameter timestampFloor: the least timestamp of the event's partition (``ContentTimestamps``).
    /// - Parameter tokenRegisteredAt: the registration of the token the content is made for
    ///   (``PushRequest/tokenRegisteredAt``).
    /// - Parameter tokenFingerprint: the fingerprint of the push-to-start token a start on a
    ///   broadcast channel goes to: its request id derives from it (``RequestIds/channelStart(bundleId:activityId:deviceId:tokenFingerprint:)``).
    ///   Without it such a start throws ``channelStartTokenUnknown``.
    public func assemble(
        _ event: ActivityEvent, app: AppTarget, appVersion: AppVersion, locale: String? = nil, memory: inout ActivityMemory, now: Date,
        images: [String: [String]] = [:], timestampFloor: Int64? = nil, tokenRegisteredAt: Date? = nil, tokenFingerprint: String? = nil
    ) throws(ContentError) -> Result {
        let plan = try plan(event, app: app, appVersion: appVersion, locale: locale, memory: memory, now: now, timestampFloor: timestampFloor)
        let fitted = try fit(plan, images: images, memory: memory, now: now)
        // A start on the channel is one request per phone and token: the token must be known.
        if plan.channelId != nil, tokenFingerprint == nil { throw Self.channelStartTokenUnknown }
        let requests = requests(plan, carrying: fitted.drafts, app: app, now: now, tokenRegisteredAt: tokenRegisteredAt, tokenFingerprint: tokenFingerprint)
        // A start on an activity's broadcast channel is one more phone's: the activity's memory is the channel's.
        if plan.channelId == nil { remember(plan, requests: requests, inlined: fitted.inlined, in: &memory, now: now) }
        return Result(requests: requests, shrinks: fitted.shrinks)
    }

    /// What an event is to become before any payload is written: its template and state, its
    /// content, the alert the policy allows, its timestamp and stale date.
    struct Plan {
        var event: ActivityEvent
        var template: ActivityTemplate
        var state: ActivityTemplate.State
        var contentState: [String: JSONValue]
        /// What the layout, links and alert render over: the domain fields and, where the event lacks
        /// one, the content state's value (its default: a goal alert shows "1 – 0", not "1 – ").
        var layoutContext: [String: Any]
        var alert: LiveActivityAPS.Alert?
        var isPushToStart: Bool
        var timestamp: Int64
        var staleDate: Date
        /// The request key: the activity id, or the push-to-start key of a push-to-start.
        var key: String
        /// The app the requests go to, named in every link.
        var app: AppTarget
        var attributes: [String: JSONValue]
        var recentAlerts: [Date]
        var layoutIncluded: Bool
        /// A push-to-start of an activity sent by broadcast: the activity's channel, which the
        /// new activity on the phone subscribes to (`input-push-channel`).
        var channelId: String?
    }

    func plan(
        _ event: ActivityEvent, app: AppTarget, appVersion: AppVersion, locale: String?, memory: ActivityMemory, now: Date,
        timestampFloor: Int64? = nil
    ) throws(ContentError) -> Plan {
        guard let template = templates[event.attributesType]?.localized(locale) else {
            throw ContentError(field: "attributesType", problem: "\(event.attributesType) has no template")
        }
        let builder = ContentBuilder(template: template)
        let state = builder.state(of: event.fields)
        let context = builder.context(fields: event.fields, state: state)
        let contentState = try builder.contentState(fields: event.fields, context: context, appVersion: appVersion)
        var layoutContext = context
        for (name, value) in contentState where layoutContext[name] == nil { layoutContext[name] = FieldValue.renderable(value) }

        // The alert policy: on a change of state that matters, within the fatigue limit.
        let recentAlerts = memory.alertTimes.filter { now.timeIntervalSince($0) < policy.alertWindow / .seconds(1) }
        let stateChanged = memory.lastState != state.name
        // The event's own alert texts stand in for the state's: in the token's language when the
        // event translates them (chosen as the template's language is), else as given.
        let presentation = event.presentation
        let alerts = state.alert != nil || presentation?.alert != nil
        var alert: LiveActivityAPS.Alert? = nil
        if alerts, event.urgency != .routine, stateChanged, recentAlerts.count < policy.maximumAlerts {
            alert = presentation?.alert.map { LiveActivityAPS.Alert($0, locale: locale, sound: state.alert?.sound) }
                ?? state.alert.map { LiveActivityAPS.Alert($0, context: layoutContext) }
        }
        let isPushToStart = event.kind == .start && event.startTarget != nil
        // A push-to-start of a type sent by broadcast starts the activity on one more phone, on
        // the activity's channel: the activity's own memory stays the channel's.
        let channelId = isPushToStart && template.broadcastStoragePolicy != nil ? try Self.channel(toJoin: memory, app: app) : nil
        if isPushToStart, alert == nil {
            // A push-to-start must alert (ActivityKit requires it); the event's, the state's text, or the type.
            alert = presentation?.alert.map { LiveActivityAPS.Alert($0, locale: locale, sound: state.alert?.sound) }
                ?? LiveActivityAPS.Alert(title: context["state"].flatMap { ($0 as? [String: Any])?["text"] as? String } ?? template.description)
        }
        if let sound = presentation?.sound { alert?.sound = sound }

        // Timestamps only move forward, and not far ahead of the clock (ContentTimestamps); the
        // stale date is never in the past. The event's own time, unless it is ahead.
        // A start on the channel carries the channel's latest timestamp, not a later one: the
        // channel's next broadcast (stamped past it) must not look older to that phone.
        let timestamp = channelId != nil
            ? memory.lastTimestamp ?? ContentTimestamps.seconds(now)
            : ContentTimestamps.next(wanted: ContentTimestamps.seconds(event.occurredAt), now: now, last: memory.lastTimestamp, floor: timestampFloor)
        let key =
            isPushToStart
            ? MessageKey.pushToStart(bundleId: app.bundleId, deviceId: event.startTarget?.deviceId ?? "", attributesType: template.attributesType)
            : event.activityId
        return Plan(
            event: event, template: template, state: state, contentState: contentState, layoutContext: layoutContext, alert: alert,
            isPushToStart: isPushToStart, timestamp: timestamp, staleDate: now.addingTimeInterval(presentation?.staleAfterSeconds.map(TimeInterval.init) ?? state.staleAfter / .seconds(1)), key: key,
            app: app, attributes: isPushToStart ? try builder.attributes(event.attributes ?? event.fields, context: context) : [:],
            recentAlerts: recentAlerts, layoutIncluded: template.layout.map { appVersion >= $0.since } ?? false, channelId: channelId)
    }

    /// Why a phone cannot start an activity sent by broadcast on its channel yet: the activity is
    /// not started (or its start is not read yet). Retried, it can succeed.
    public static let joinBeforeStart = ContentError(
        field: "startTarget",
        problem: "the activity is sent by broadcast and is not started: send its start (without startTarget) first; its first broadcast makes the channel a phone's activity starts on")
    /// Why a phone cannot start an activity sent by broadcast on its channel yet: the channel is
    /// not made (its first broadcast is on its way). Retried, it can succeed.
    public static let channelNotMade = ContentError(
        field: "startTarget",
        problem: "the activity's broadcast channel is not made yet (its first broadcast is on its way): send the start again in a moment")

    /// Why a phone cannot start an activity sent by broadcast on its channel yet: content-service
    /// knows no push-to-start token of the device for the type (the app has not registered one, or
    /// the token table has not read it yet). Retried, it can succeed.
    public static let channelStartTokenUnknown = ContentError(
        field: "startTarget.deviceId",
        problem: "no push-to-start token of this device for the type is known (yet): the app registers it; send the start again in a moment")

    /// The refusals of a push-to-start on a broadcast channel that a retry can get past.
    public static let retryableChannelStarts: Set<ContentError> = [joinBeforeStart, channelNotMade, channelStartTokenUnknown]

    /// The channel a push-to-start of an activity sent by broadcast starts it on: the activity's,
    /// once it is started, its channel made, and not ended.
    static func channel(toJoin memory: ActivityMemory, app: AppTarget) throws(ContentError) -> String {
        if memory.ended {
            throw ContentError(field: "startTarget", problem: "the activity has ended: no phone can start it any more")
        }
        guard let latest = memory.latest else { throw joinBeforeStart }
        // A channel never crosses environments: a development build's phone cannot join a production channel.
        guard latest.app.environment == app.environment else {
            throw ContentError(
                field: "startTarget.app.environment",
                problem: "the device's push-to-start token is for \(app.environment.rawValue), the activity's channel for \(latest.app.environment.rawValue)")
        }
        guard let channelId = memory.channelId else { throw channelNotMade }
        return channelId
    }

    /// One way of shrinking the payload, and what it gives up compared with the one before.
    struct Shrink {
        var imageRung: Int?
        var dropBelow = Int.min
        var cap: Int?

        /// What the step gives up (said only of a step after the first).
        var description: String {
            if let imageRung { return "inline image at size \(imageRung + 1)" }
            if let cap { return "texts cut to \(cap) characters" }
            if dropBelow != Int.min { return "texts of rank \(dropBelow - 1)" }
            return "inline image data"
        }
    }

    /// The shrink steps, in order: inline images smaller, then without their data (the URL stays),
    /// then texts rank by rank (lowest first), then every text still too long cut (on a character,
    /// with an ellipsis) to a shorter and shorter length, down to ``textFloor`` characters; only a
    /// payload that cannot fit with every text at the floor is refused.
    func shrinks(_ plan: Plan, images: [String: [String]]) -> [Shrink] {
        let ranks = plan.layoutIncluded ? self.ranks[plan.template.attributesType] ?? Self.ranks(in: plan.template.layout!) : []
        let rungs = plan.layoutIncluded ? images.values.map(\.count).max() ?? 0 : 0
        let allRanksDropped = ranks.last.map { $0 + 1 } ?? Int.min
        var steps = (0..<rungs).map { Shrink(imageRung: $0) }
        steps.reserveCapacity(rungs + 1 + ranks.count + Self.textCaps.count)
        steps.append(Shrink())
        for rank in ranks { steps.append(Shrink(dropBelow: rank + 1)) }
        for cap in Self.textCaps { steps.append(Shrink(dropBelow: allRanksDropped, cap: cap)) }
        return steps
    }

    /// A payload to send: its event, its `aps`, and whether it alerts.
    struct Draft {
        let kind: ActivityEventKind
        let aps: LiveActivityAPS
        let alerting: Bool
        /// The payload, written once (measured against 4 KB, then sent).
        let payload: String

        init(kind: ActivityEventKind, aps: LiveActivityAPS, alerting: Bool) {
            (self.kind, self.aps, self.alerting) = (kind, aps, alerting)
            payload = aps.payload
        }
    }

    /// The payloads of the first shrink step at which all of them fit 4 KB; what was given up on
    /// the way; the images inlined in them.
    func fit(
        _ plan: Plan, images: [String: [String]], memory: ActivityMemory, now: Date
    ) throws(ContentError) -> (drafts: [Draft], shrinks: [String], inlined: Set<String>) {
        let steps = shrinks(plan, images: images)
        // The links' shared part is checked and signed once for every step.
        let links = plan.layoutIncluded
            ? try LayoutRenderer.links(
                baseURL: plan.template.link.render(plan.layoutContext), template: plan.template, event: plan.event, app: plan.app, keyring: keyring,
                issuedAt: now)
            : nil
        var given: [String] = []
        for (index, step) in steps.enumerated() {
            if index > 0 { given.append(step.description) }
            var contentState = plan.contentState
            var inlined: Set<String> = []
            if let links, let layout = plan.template.layout {
                let renderer = LayoutRenderer(
                    context: plan.layoutContext, contentState: contentState, links: links, images: images, imageRung: step.imageRung,
                    alreadyInlined: memory.inlinedImages)
                contentState["layout"] = try renderer.render(layout, droppingRanksBelow: step.dropBelow)
                contentState["links"] = try renderer.widgetLinks()
                if step.imageRung != nil {
                    inlined = Set(LayoutRenderer.imageURLs(layout, context: plan.layoutContext)).subtracting(memory.inlinedImages).filter { images[$0] != nil }
                }
            }
            let drafts = self.drafts(plan, contentState: contentState, cap: step.cap, now: now)
            // ActivityKit's 4 KB of data holds for a broadcast too, though APNs takes 5 KB there.
            guard let tooLarge = drafts.first(where: { $0.payload.utf8.count > PushRequest.maximumPayloadBytes }) else {
                return (drafts, given, inlined)
            }
            guard index < steps.count - 1 else {
                throw ContentError(
                    field: "payload", problem: "is \(tooLarge.payload.utf8.count) bytes after every shrink, more than \(PushRequest.maximumPayloadBytes)")
            }
        }
        throw ContentError(field: "payload", problem: "has no shrink step")
    }

    /// The payloads of one event at one shrink step: an end whose alert iOS would ignore becomes an
    /// alerting update first; an app-started activity's first content is an update.
    func drafts(_ plan: Plan, contentState: [String: JSONValue], cap: Int?, now: Date) -> [Draft] {
        var contentState = contentState
        var alert = plan.alert
        if let cap {
            // Texts for people only: the layout's texts and labels, the content state's text
            // fields, the alert. Never ids, states, links, URLs, dates or the static attributes.
            for field in plan.template.contentState where field.isText {
                contentState[field.name] = contentState[field.name].map { Self.cut($0, to: cap, keeping: []) }
            }
            contentState["layout"] = contentState["layout"].map { Self.cut($0, to: cap, keeping: Self.untouchedKeys) }
            alert = alert?.cut(to: cap)
        }
        var aps = LiveActivityAPS(
            event: plan.event.kind, timestamp: plan.timestamp, contentState: contentState,
            staleDate: Int64(plan.staleDate.timeIntervalSince1970.rounded(.up)), relevanceScore: plan.event.presentation?.relevanceScore ?? plan.state.relevance)
        if plan.isPushToStart {
            aps.start = .init(attributesType: plan.template.attributesType, attributes: plan.attributes, channelId: plan.channelId)
            aps.alert = alert
        }
        switch plan.event.kind {
        case .end:
            // iOS ignores an alert on end: an alerting update goes first, with the final content.
            // Both carry the same timestamp (one past it could be ahead of the clock by more than
            // the lead): iOS shows an equal timestamp, and an end ends whatever it is stamped.
            var drafts: [Draft] = []
            if let alert {
                var update = aps
                update.event = .update
                update.alert = alert
                drafts.append(Draft(kind: .update, aps: update, alerting: true))
            }
            aps.dismissalDate = Self.dismissalDate(plan.event.presentation?.dismissal, policy: policy, now: now)
            return drafts + [Draft(kind: .end, aps: aps, alerting: false)]
        case .start where !plan.isPushToStart:
            // The app started the activity itself: its first content is an update (a `start`
            // event goes only to a push-to-start token).
            aps.event = .update
            aps.alert = alert
            return [Draft(kind: .update, aps: aps, alerting: alert != nil)]
        default:
            if !plan.isPushToStart { aps.alert = alert }
            return [Draft(kind: plan.event.kind, aps: aps, alerting: alert != nil)]
        }
    }

    /// The `aps.dismissal-date` of an end sent at `now`: the event's (at once: a second ago), else the policy's.
    static func dismissalDate(_ dismissal: EventPresentation.Dismissal?, policy: ContentPolicy, now: Date) -> Int64? {
        switch dismissal {
        case .immediate?: Int64(now.timeIntervalSince1970.rounded(.down)) - 1
        // Within iOS's 4 hours of the end, whatever the event's own time said.
        case .at(let date)?: Int64(min(max(date, now), now.addingTimeInterval(EventPresentation.maximumDismissal)).timeIntervalSince1970.rounded(.up))
        case nil: policy.dismissalDate(now: now)
        }
    }

    /// The push requests carrying `drafts`, in order.
    func requests(_ plan: Plan, carrying drafts: [Draft], app: AppTarget, now: Date, tokenRegisteredAt: Date? = nil, tokenFingerprint: String? = nil) -> [PushRequest] {
        let event = plan.event
        let priority = policy.priority(for: event.urgency)
        return drafts.enumerated().map { index, draft in
            let isAlertBeforeEnd = event.kind == .end && index < drafts.count - 1
            let contentId =
                isAlertBeforeEnd
                ? RequestIds.alertBeforeEnd(bundleId: app.bundleId, activityId: event.activityId, eventId: event.eventId)
                : RequestIds.content(bundleId: app.bundleId, activityId: event.activityId, eventId: event.eventId)
            // A start to every device of a user: each device's own id, the first device's too (a
            // next owner whose table orders the devices otherwise makes the same id for each).
            let userStart = plan.isPushToStart && event.startTarget?.userId != nil
            let deviceId = event.startTarget?.deviceId ?? ""
            let requestId =
                plan.channelId != nil
                ? RequestIds.channelStart(bundleId: app.bundleId, activityId: event.activityId, deviceId: deviceId, tokenFingerprint: tokenFingerprint ?? "")
                : userStart ? RequestIds.copy(of: contentId, deviceId: deviceId) : contentId
            return PushRequest(
                requestId: requestId,
                activityId: plan.isPushToStart ? nil : event.activityId,
                pushToStartKey: plan.isPushToStart ? plan.key : nil, event: draft.kind, app: app, attributesType: plan.template.attributesType,
                payload: draft.payload, priority: priority, urgency: event.urgency, supersedable: draft.kind == .update && !draft.alerting,
                alerting: draft.alerting, apnsTimestamp: plan.timestamp, contentSequence: event.sequence,
                staleDate: plan.staleDate, expiration: draft.kind == .update ? plan.staleDate : now.addingTimeInterval(3_600), createdAt: now,
                sourceEventId: event.eventId, sourceActivityId: event.activityId, state: plan.state.name,
                channelStoragePolicy: plan.isPushToStart ? nil : plan.template.broadcastStoragePolicy, tokenRegisteredAt: tokenRegisteredAt,
                // A start to every device of a user: this one, for its first device, names the group
                // (ContentEngine.withStartCopies makes the others).
                startGroup: userStart ? requestId : nil, channelId: plan.channelId)
        }
    }

    /// What the activity's memory keeps of the requests made for an event.
    func remember(_ plan: Plan, requests: [PushRequest], inlined: Set<String>, in memory: inout ActivityMemory, now: Date) {
        memory.alertTimes = plan.recentAlerts
        // Inlined once delivered (``ActivityMemory/record(_:)``): the request that carries them.
        if !inlined.isEmpty {
            for request in requests where ActivityMemory.contains(request.payload.utf8, #""data":"#.utf8) {
                memory.pendingImages[request.requestId] = ActivityMemory.PendingImages(urls: inlined, since: now)
            }
        }
        if plan.event.kind == .start {
            // A (re)start: a new life for the activity id.
            memory.ended = false
            memory.gone = false
            memory.startedAt = nil
            memory.channelId = nil
        }
        for request in requests { memory.replay(request, scanImages: false) }
    }

    /// The image URLs the event's layout shows (to fetch their thumbnails before assembling).
    public func imageURLs(for event: ActivityEvent) -> [String] {
        guard let template = templates[event.attributesType], let layout = template.layout else { return [] }
        let builder = ContentBuilder(template: template)
        return LayoutRenderer.imageURLs(layout, context: builder.context(fields: event.fields, state: builder.state(of: event.fields)))
    }

    /// The distinct ranks of droppable texts, lowest first.
    /// The lengths texts are cut to, in turn, when the payload does not fit otherwise; the last is
    /// the floor.
    static let textCaps = [1_024, 512, 256, 128, 64, textFloor]
    /// No text is cut shorter than this many characters (with its ellipsis).
    static let textFloor = 32
    /// What in a layout is not a text for people: links, image URLs and data, icons, timers.
    static let untouchedKeys: Set<String> = ["links", "link", "url", "data", "icon", "timer"]

    /// `text` cut to `cap` characters (the last an ellipsis) on a character boundary, when longer.
    static func cut(_ text: String, to cap: Int) -> String {
        text.count > cap ? String(text.prefix(cap - 1)) + "…" : text
    }

    /// `value` with every string longer than `cap` characters cut to `cap` (the last an ellipsis),
    /// on a character boundary, except under `keeping` keys.
    static func cut(_ value: JSONValue, to cap: Int, keeping: Set<String>) -> JSONValue {
        switch value {
        case .string(let text):
            return .string(cut(text, to: cap))
        case .object(let members):
            return .object(Dictionary(uniqueKeysWithValues: members.map { key, member in (key, keeping.contains(key) ? member : cut(member, to: cap, keeping: keeping)) }))
        case .array(let items):
            return .array(items.map { cut($0, to: cap, keeping: keeping) })
        default:
            return value
        }
    }

    static func ranks(in layout: ActivityTemplate.Layout) -> [Int] {
        var ranks: Set<Int> = []
        for component in layout.allComponents {
            if case .richText(let elements, _) = component {
                for element in elements { if let rank = element.rank { ranks.insert(rank) } }
            }
        }
        return ranks.sorted()
    }

    static func encode(_ value: [String: JSONValue]) -> String {
        // Sorted keys and no escaped slashes: equal content is equal bytes, and URLs stay short.
        String(decoding: JSONValue.object(value).jsonBytes, as: UTF8.self)
    }
}
