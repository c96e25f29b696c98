import Foundation
import IsletLinks
import IsletMessages
import Mustache

/// What content-service remembers of an activity between events. Rebuilt after a restart from its
/// own output (`islet.push-requests.v1`) and the dispatcher's answers (`islet.push-outcomes.v1`).
public struct ActivityMemory: Sendable, Equatable {
    /// The highest event sequence applied: older or equal ones are ignored.
    public var lastSequence: Int64?
    /// The last `aps.timestamp` sent: the next is always higher.
    public var lastTimestamp: Int64?
    /// The state of the last content sent (alerts fire on a change of state).
    public var lastState: String?
    /// When alerts were sent, within the alert window.
    public var alertTimes: [Date] = []
    public var startedAt: Date?
    public var ended = false
    /// The last request sent: what the phone should show (re-sent when it goes stale).
    public var latest: PushRequest?
    /// The dispatcher's answers to the activity's recent requests, by request id.
    public var outcomes: [String: PushResult] = [:]
    /// The request of the latest event's content (re-sends are numbered after it).
    public var contentRequestId: String?
    /// Re-sends of the latest event's content so far, and the last one's time.
    public var resends = 0
    public var lastResendAt: Date?
    /// The activity's token is dead (APNs said so): nothing more is sent to it, until the app
    /// registers it again (``goneAt``, ``goneToken``: the verdict, and the token's fingerprint).
    public var gone = false
    public var goneAt: Date?
    public var goneToken: String?
    /// The image URLs whose data reached the phone inlined in one of the activity's payloads (APNs
    /// accepted that push): later payloads carry the URL only.
    public var inlinedImages: Set<String> = []
    /// Images inlined in requests not delivered yet, by request id: they count as inlined once
    /// their request is delivered; coalesced or failed, the next payload inlines them again.
    public var pendingImages: [String: PendingImages] = [:]

    public struct PendingImages: Sendable, Equatable {
        public var urls: Set<String>
        /// When the request carrying them was made: one whose outcome never comes (it was read
        /// before a rebuild reached it) counts as delivered after ``ActivityMemory/pendingLifetime``.
        public var since: Date
    }

    /// How long an inlined image waits for its request's outcome before it counts as delivered.
    static let pendingLifetime: TimeInterval = 600
    /// The partition of the activity's records: the freshness monitor of the instance that owns it
    /// looks after it.
    public var partition: Int32?

    public init() {}

    /// A request read back from `islet.push-requests.v1` (this instance's or another's): applied
    /// when it is newer than what is remembered, so reading one twice changes nothing.
    /// - Parameter scanImages: look for inlined images in the payload (when read back from Kafka;
    ///   the assembler knows what it inlined).
    mutating func replay(_ request: PushRequest, scanImages: Bool = true) {
        if let last = lastTimestamp, request.apnsTimestamp <= last { return }
        lastTimestamp = request.apnsTimestamp
        latest = request
        if let state = request.state { lastState = state }
        if request.sourceEventId != nil {
            lastSequence = max(lastSequence ?? request.contentSequence, request.contentSequence)
            contentRequestId = request.requestId
            resends = 0
            lastResendAt = nil
        } else if request.event == .update {
            resends += 1
            lastResendAt = request.createdAt
        }
        if request.alerting {
            alertTimes.append(request.createdAt)
            if alertTimes.count > 16 { alertTimes.removeFirst(alertTimes.count - 16) }
        }
        if request.event == .start {
            startedAt = request.createdAt
            ended = false
            gone = false
        } else if startedAt == nil {
            startedAt = request.createdAt
        }
        if request.event == .end { ended = true }
        if scanImages, request.payload.utf8.count > 1_500, Self.contains(request.payload.utf8, #""data":"#.utf8) {
            let urls = Self.inlinedImageURLs(in: request.payload).subtracting(inlinedImages)
            switch outcomes[request.requestId] {
            case .delivered?, .deliveredDowngraded?: inlinedImages.formUnion(urls)  // its outcome was read first
            case .some: break
            case nil: if !urls.isEmpty { pendingImages[request.requestId] = PendingImages(urls: urls, since: request.createdAt) }
            }
        }
        // Outcomes that never came (their request read back, their outcome not): delivered, as
        // most are, rather than inlined again for ever.
        for (id, pending) in pendingImages where request.createdAt.timeIntervalSince(pending.since) > Self.pendingLifetime {
            inlinedImages.formUnion(pending.urls)
            pendingImages[id] = nil
        }
    }

    static func contains(_ text: String.UTF8View, _ needle: String.UTF8View) -> Bool {
        let (haystack, pattern) = (Array(text), Array(needle))
        guard haystack.count >= pattern.count else { return false }
        for start in 0...(haystack.count - pattern.count) where haystack[start] == pattern[0] {
            if haystack[start..<(start + pattern.count)].elementsEqual(pattern) { return true }
        }
        return false
    }

    /// The URLs of the remote images carrying inline data in a payload.
    static func inlinedImageURLs(in payload: String) -> Set<String> {
        guard let root = try? IsletJSON.decodeValue(JSONValue.self, from: Array(payload.utf8)),
            case .object(let layout)? = root["aps"]?["content-state"]?["layout"]
        else { return [] }
        var urls: Set<String> = []
        for case .array(let components) in layout.values {
            for component in components {
                if let image = component["remoteImage"], image["data"] != nil, let url = image["url"]?.stringValue { urls.insert(url) }
            }
        }
        return urls
    }

    /// The activity's last request was a push-to-start that certainly did not start it (APNs
    /// refused it or its token, it expired, no token was there): the backend may try a new start.
    /// Not after `failed`: its answer was unknown, and it may have started the activity.
    var startNeverArrived: Bool {
        guard let latest, latest.pushToStartKey != nil, let result = outcomes[latest.requestId] else { return false }
        return [.rejected, .expired, .awaitingToken, .tokenInvalid, .coalesced].contains(result)
    }

    /// The dispatcher's final answer to one of the activity's requests.
    mutating func record(_ outcome: PushOutcome) {
        if outcomes.count >= 8, let oldest = outcomes.keys.first(where: { $0 != latest?.requestId }) { outcomes[oldest] = nil }
        outcomes[outcome.requestId] = outcome.result
        if let images = pendingImages.removeValue(forKey: outcome.requestId), outcome.result == .delivered || outcome.result == .deliveredDowngraded {
            inlinedImages.formUnion(images.urls)
        }
        if outcome.result == .tokenInvalid, outcome.requestId == latest?.requestId, latest?.pushToStartKey == nil {
            gone = true
            goneAt = outcome.completedAt
            goneToken = outcome.tokenFingerprint
        } else if outcome.result == .delivered || outcome.result == .deliveredDowngraded, outcome.requestId == latest?.requestId {
            gone = false
        }
    }
}

/// The rules of content: alert fatigue, priority, dismissal.
public struct ContentPolicy: Sendable {
    public enum Dismissal: Sendable, Equatable {
        /// Leave the ended activity on the Lock Screen as iOS decides (up to 4 hours).
        case system
        /// Remove it at once.
        case immediate
        /// Remove it this long after the end (at most 4 hours).
        case after(Duration)
    }

    /// At most this many alerting pushes per activity in ``alertWindow`` (reminder fatigue).
    public var maximumAlerts = 3
    public var alertWindow: Duration = .seconds(3_600)
    public var dismissal: Dismissal = .after(.seconds(900))

    public init() {}

    /// The `aps.dismissal-date` of an end sent at `now` (`nil`: iOS decides).
    public func dismissalDate(now: Date) -> Int64? {
        switch dismissal {
        case .system: nil
        case .immediate: Int64(now.timeIntervalSince1970.rounded(.down)) - 1
        case .after(let delay): Int64(now.addingTimeInterval(min(delay / .seconds(1), 4 * 3_600)).timeIntervalSince1970.rounded(.up))
        }
    }

    /// Priority 10 for what the user must see now, 5 for the rest.
    public func priority(for urgency: Urgency) -> Int { urgency == .routine ? 5 : 10 }
}

/// Turns one domain event into the APNs requests for it: the content state for the app version,
/// the layout, signed links, `aps` with timestamp, stale date, relevance, alert, dismissal — within
/// 4 KB, shrinking in a declared order when it is not.
public struct PayloadAssembler: Sendable {
    public let templates: [String: ActivityTemplate]
    public let keyring: LinkKeyring
    public let policy: ContentPolicy

    public init(templates: [String: ActivityTemplate], keyring: LinkKeyring, policy: ContentPolicy = ContentPolicy()) {
        self.templates = templates
        self.keyring = keyring
        self.policy = policy
    }

    /// What one event produces.
    public struct Result: Sendable {
        public var requests: [PushRequest]
        /// What had to go to fit 4 KB (`rank 1 texts`), in order.
        public var shrinks: [String]
    }

    /// The requests for `event`, sent to `app` for an app of `appVersion`; updates `memory`.
    /// Throws (nothing is produced) when the event does not fit its template, or cannot fit 4 KB.
    /// - Parameter images: thumbnails by image URL (base64 JPEG, best first; ``ThumbnailService``).
    public func assemble(
        _ event: ActivityEvent, app: AppTarget, appVersion: AppVersion, memory: inout ActivityMemory, now: Date, images: [String: [String]] = [:]
    ) throws(ContentError) -> Result {
        guard let template = templates[event.attributesType] else {
            throw ContentError(field: "attributesType", problem: "\(event.attributesType) has no template")
        }
        let builder = ContentBuilder(template: template)
        let state = builder.state(of: event.fields)
        let context = builder.context(fields: event.fields, state: state)
        var contentState = try builder.contentState(fields: event.fields, context: context, appVersion: appVersion)
        // The layout, the link and the alert render over the domain fields and, where the event
        // lacks one, the content state's value (its default: a goal alert shows "1 – 0", not "1 – ").
        var layoutContext = context
        for (name, value) in contentState where layoutContext[name] == nil { layoutContext[name] = FieldValue.renderable(value) }

        // The alert policy: on a change of state that matters, within the fatigue limit.
        let recentAlerts = memory.alertTimes.filter { now.timeIntervalSince($0) < policy.alertWindow / .seconds(1) }
        let stateChanged = memory.lastState != state.name
        var alert = state.alert.flatMap { alert -> JSONValue? in
            guard event.urgency != .routine, stateChanged, recentAlerts.count < policy.maximumAlerts else { return nil }
            return Self.alertJSON(alert, context: layoutContext)
        }
        let isPushToStart = event.kind == .start && event.startTarget != nil
        if isPushToStart, alert == nil {
            // A push-to-start must alert (ActivityKit requires it); the state's text, or the type.
            alert = .object(["title": .string(context["state"].flatMap { ($0 as? [String: Any])?["text"] as? String } ?? template.description)])
        }

        // Timestamps only move forward; the stale date is never in the past.
        // The event's own time (a backend clock far ahead is not believed: iOS drops a timestamp
        // more than 8 hours ahead).
        var timestamp = min(Int64(event.occurredAt.timeIntervalSince1970.rounded(.down)), Int64(now.timeIntervalSince1970.rounded(.down)) + 60)
        if let last = memory.lastTimestamp, timestamp <= last { timestamp = last + 1 }
        let staleDate = now.addingTimeInterval(state.staleAfter / .seconds(1))
        let key = isPushToStart ? MessageKey.pushToStart(bundleId: app.bundleId, deviceId: event.startTarget!.deviceId, attributesType: template.attributesType) : event.activityId

        let attributes = isPushToStart ? try builder.attributes(event.attributes ?? event.fields, context: context) : [:]

        // Layout and links, shrunk until the payload fits: inline images smaller, then without
        // their data (the URL stays), then texts rank by rank (lowest first), then every text
        // still too long is cut (on a character, with an ellipsis) to a shorter and shorter
        // length, down to ``textFloor`` characters; only a payload that cannot fit with every text
        // at the floor is refused.
        let layoutIncluded = template.layout.map { appVersion >= $0.since } ?? false
        let ranks = layoutIncluded ? Self.ranks(in: template.layout!) : []
        let rungs = layoutIncluded ? images.values.map(\.count).max() ?? 0 : 0
        let allRanksDropped = ranks.last.map { $0 + 1 } ?? Int.min
        // Each attempt, and what it gives up compared with the one before.
        let attempts: [(imageRung: Int?, dropBelow: Int, cap: Int?, shrink: String)] =
            (0..<rungs).map { ($0, Int.min, nil, "inline image at size \($0 + 1)") } + [(nil, Int.min, nil, rungs > 0 ? "inline image data" : "")]
            + ranks.map { (nil, $0 + 1, nil, "texts of rank \($0)") }
            + Self.textCaps.map { (nil, allRanksDropped, $0, "texts cut to \($0) characters") }
        var shrinks: [String] = []
        var requests: [PushRequest] = []
        var inlined: Set<String> = []
        let baseURL = layoutIncluded ? template.link.render(layoutContext) : ""
        for (attempt, (imageRung, dropBelow, cap, _)) in attempts.enumerated() {
            if attempt > 0 { shrinks.append(attempts[attempt].shrink) }
            if layoutIncluded, let layout = template.layout {
                let renderer = LayoutRenderer(
                    template: template, context: layoutContext, contentState: contentState, keyring: keyring, activityId: event.activityId,
                    sequence: event.sequence, issuedAt: now, baseURL: baseURL, images: images, imageRung: imageRung, alreadyInlined: memory.inlinedImages)
                contentState["layout"] = try renderer.render(layout, droppingRanksBelow: dropBelow)
                contentState["links"] = try renderer.widgetLinks()
                inlined = imageRung == nil ? [] : Set(renderer.imageURLs(layout)).subtracting(memory.inlinedImages).filter { images[$0] != nil }
            }
            var aps: [String: JSONValue] = [
                "timestamp": .integer(timestamp), "event": .string(event.kind.rawValue), "content-state": .object(contentState),
                "stale-date": .integer(Int64(staleDate.timeIntervalSince1970.rounded(.up))), "relevance-score": .number(state.relevance),
            ]
            if isPushToStart {
                aps["attributes-type"] = .string(template.attributesType)
                aps["attributes"] = .object(attributes)
                aps["input-push-token"] = .integer(1)
                aps["alert"] = alert
            }
            var alert = alert
            if let cap, case .object(var state)? = aps["content-state"] {
                // Texts for people only: the layout's texts and labels, the content state's text
                // fields, the alert. Never ids, states, links, URLs, dates or the static attributes.
                for field in template.contentState where field.isText {
                    state[field.name] = state[field.name].map { Self.cut($0, to: cap, keeping: []) }
                }
                state["layout"] = state["layout"].map { Self.cut($0, to: cap, keeping: Self.untouchedKeys) }
                aps["content-state"] = .object(state)
                alert = alert.map { Self.cut($0, to: cap, keeping: ["sound"]) }
                if aps["alert"] != nil { aps["alert"] = alert }
            }
            var built: [(ActivityEventKind, [String: JSONValue], Bool)] = []
            if event.kind == .end {
                // iOS ignores an alert on end: an alerting update goes first, with the final content.
                if let alert {
                    var update = aps
                    update["event"] = .string("update")
                    update["alert"] = alert
                    built.append((.update, update, true))
                    aps["timestamp"] = .integer(timestamp + 1)
                }
                if let dismissal = policy.dismissalDate(now: now) { aps["dismissal-date"] = .integer(dismissal) }
                built.append((.end, aps, false))
            } else if event.kind == .start, !isPushToStart {
                // The app started the activity itself: its first content is an update (a `start`
                // event goes only to a push-to-start token).
                aps["event"] = .string("update")
                if let alert { aps["alert"] = alert }
                built.append((.update, aps, alert != nil))
            } else {
                if !isPushToStart, let alert { aps["alert"] = alert }
                built.append((event.kind, aps, alert != nil))
            }

            let payloads = built.map { kind, aps, alerting in (kind, Self.encode(["aps": .object(aps)]), alerting) }
            if let tooLarge = payloads.first(where: { $0.1.utf8.count > PushRequest.maximumPayloadBytes }) {
                guard attempt < attempts.count - 1 else {
                    throw ContentError(
                        field: "payload",
                        problem: "is \(tooLarge.1.utf8.count) bytes after every shrink, more than \(PushRequest.maximumPayloadBytes)")
                }
                continue
            }
            let priority = policy.priority(for: event.urgency)
            requests = payloads.enumerated().map { index, item in
                let (kind, payload, alerting) = item
                let isAlertBeforeEnd = event.kind == .end && index < payloads.count - 1
                return PushRequest(
                    requestId: isAlertBeforeEnd
                        ? RequestIds.alertBeforeEnd(bundleId: app.bundleId, activityId: event.activityId, eventId: event.eventId)
                        : RequestIds.content(bundleId: app.bundleId, activityId: event.activityId, eventId: event.eventId),
                    activityId: isPushToStart ? nil : event.activityId,
                    pushToStartKey: isPushToStart ? key : nil, event: kind, app: app, attributesType: template.attributesType, payload: payload,
                    priority: priority, urgency: event.urgency, supersedable: kind == .update && !alerting, alerting: alerting,
                    apnsTimestamp: timestamp + Int64(index), contentSequence: event.sequence, staleDate: staleDate,
                    expiration: kind == .update ? staleDate : now.addingTimeInterval(3_600), createdAt: now, sourceEventId: event.eventId,
                    sourceActivityId: event.activityId, state: state.name)
            }
            break
        }

        memory.alertTimes = recentAlerts
        // Inlined once delivered (``ActivityMemory/record(_:)``): the request that carries them.
        if !inlined.isEmpty {
            for request in requests where ActivityMemory.contains(request.payload.utf8, #""data":"#.utf8) {
                memory.pendingImages[request.requestId] = ActivityMemory.PendingImages(urls: inlined, since: now)
            }
        }
        if event.kind == .start {
            // A (re)start: a new life for the activity id.
            memory.ended = false
            memory.gone = false
            memory.startedAt = nil
        }
        for request in requests { memory.replay(request, scanImages: false) }
        return Result(requests: requests, shrinks: shrinks)
    }

    /// The image URLs the event's layout shows (to fetch their thumbnails before assembling).
    public func imageURLs(for event: ActivityEvent) -> [String] {
        guard let template = templates[event.attributesType], let layout = template.layout else { return [] }
        let builder = ContentBuilder(template: template)
        let context = builder.context(fields: event.fields, state: builder.state(of: event.fields))
        return LayoutRenderer(
            template: template, context: context, contentState: [:], keyring: keyring, activityId: event.activityId, sequence: event.sequence,
            issuedAt: Date(), baseURL: ""
        ).imageURLs(layout)
    }

    static func alertJSON(_ alert: ActivityTemplate.Alert, context: [String: Any]) -> JSONValue {
        var members: [String: JSONValue] = ["title": .string(alert.title.render(context)), "body": .string(alert.body.render(context))]
        if let sound = alert.sound { members["sound"] = .string(sound) }
        return .object(members)
    }

    /// The distinct ranks of droppable texts, lowest first.
    /// The lengths texts are cut to, in turn, when the payload does not fit otherwise; the last is
    /// the floor.
    static let textCaps = [1_024, 512, 256, 128, 64, textFloor]
    /// No text is cut shorter than this many characters (with its ellipsis).
    static let textFloor = 32
    /// What in a layout is not a text for people: links, image URLs and data, icons, timers.
    static let untouchedKeys: Set<String> = ["links", "link", "url", "data", "icon", "timer"]

    /// `value` with every string longer than `cap` characters cut to `cap` (the last an ellipsis),
    /// on a character boundary, except under `keeping` keys.
    static func cut(_ value: JSONValue, to cap: Int, keeping: Set<String>) -> JSONValue {
        switch value {
        case .string(let text) where text.count > cap:
            return .string(String(text.prefix(cap - 1)) + "…")
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
        for component in layout.minimal + layout.compactLeading + layout.compactTrailing + layout.expanded {
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
