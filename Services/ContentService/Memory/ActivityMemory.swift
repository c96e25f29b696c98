import Foundation
import IsletKafka
import IsletMessages
import Synchronization

/// What content-service remembers of an activity between events, in about 180 bytes: restored at
/// start from its changelog (`islet.content-memory.v1`), kept up to date from the service's own
/// requests (`islet.push-requests.v1`) and the dispatcher's answers (`islet.push-outcomes.v1`).
///
/// Laid out for a million of them per instance (issue 24): optional numbers and dates are held
/// with a sentinel instead of an `Optional`'s extra byte and padding, strings that repeat across
/// activities (states, attributes types, apps, event kinds, results) as codes of a process-wide
/// table (``Interned``), request ids as their 16 UUID bytes, and what few activities need (a dead
/// token's verdict, images, outcomes that came before their request, the latest request in full)
/// in ``Extras``, allocated only when one of them is there. The latest request's payload is not
/// kept once Kafka has it: it is read again from where it is stored the few times it is needed.
public struct ActivityMemory: Sendable, Equatable {
    private var sequence = PackedInt()
    private var timestamp = PackedInt()
    private var started = PackedDate()
    private var resendAt = PackedDate()
    private var storedOffset: Int64 = 0
    private var storedPartition: Int32 = 0
    private var partitionCode: Int32 = -1
    private var state: UInt32 = 0
    private var latestResult: UInt32 = 0
    private var summary = LatestRequest.none
    private var resendCount: UInt16 = 0
    private var flags: Flags = []
    private var alerts: [Double] = []
    private var recentOutcomes = OutcomePositions()
    /// Zero or one: most activities have none, and an empty array allocates nothing.
    private var extras: [Extras] = []

    private struct Flags: OptionSet, Sendable, Equatable {
        let rawValue: UInt8
        static let ended = Flags(rawValue: 1)
        static let gone = Flags(rawValue: 2)
        static let payloadLost = Flags(rawValue: 4)
        static let stored = Flags(rawValue: 8)
        /// ``contentRequestId`` is the latest request's id (not a re-send's).
        static let contentIsLatest = Flags(rawValue: 16)
    }

    /// What few activities need.
    struct Extras: Sendable, Equatable {
        var goneAt: Date?
        var goneToken: String?
        var inlinedImages: Set<String> = []
        var pendingImages: [String: PendingImages] = [:]
        /// The latest request's push-to-start key.
        var pushToStartKey: String?
        /// The push-to-start key the activity was started with (kept after the start): its
        /// token's app, version and locale stand for the activity's own token until content-service
        /// has read that.
        var startedWith: String?
        /// The request of the latest event's content, when the latest is a re-send of it.
        var contentRequestId: String?
        /// The latest request in full, payload included: until Kafka has it, or read again from
        /// there for the monitor (until the next request).
        var request: PushRequest?
        /// Outcomes of requests other than the latest, that may be newer (read before their request).
        var waiting: [WaitingOutcome] = []
        /// Events scheduled for later, the earliest first.
        var steps: [ActivityEvent] = []
        /// The delivered push-to-start waiting for the activity's update token (its watchdog).
        var startWatch: ContentMemoryRecord.StartWatch?
        /// The activity's broadcast channel, from the dispatcher's answers to its broadcasts.
        var channelId: String?

        var isEmpty: Bool {
            goneAt == nil && goneToken == nil && inlinedImages.isEmpty && pendingImages.isEmpty && pushToStartKey == nil && startedWith == nil
                && contentRequestId == nil
                && request == nil && waiting.isEmpty && steps.isEmpty && startWatch == nil && channelId == nil
        }
    }

    struct WaitingOutcome: Sendable, Equatable {
        var requestId: String
        var result: PushResult
        var completedAt: Date
    }

    public struct PendingImages: Sendable, Equatable {
        public var urls: Set<String>
        /// When the request carrying them was made: one whose outcome never comes (it was read
        /// before a rebuild reached it) counts as delivered after ``ActivityMemory/pendingLifetime``.
        public var since: Date

        public init(urls: Set<String>, since: Date) {
            self.urls = urls
            self.since = since
        }
    }

    /// How long an inlined image waits for its request's outcome before it counts as delivered.
    static let pendingLifetime: TimeInterval = 600
    /// Outcomes waiting for their request: at most this many per activity, for at most this long.
    static let waitingLimit = 4
    static let waitingLifetime: TimeInterval = 600

    public init() {}

    private var rare: Extras { extras.first ?? Extras() }

    private mutating func withExtras<Result>(_ change: (inout Extras) -> Result) -> Result {
        if extras.isEmpty { extras = [Extras()] }
        let result = change(&extras[0])
        if extras[0].isEmpty { extras = [] }
        return result
    }

    // MARK: What is remembered

    /// The highest event sequence applied: older or equal ones are ignored.
    public var lastSequence: Int64? {
        get { sequence.value }
        set { sequence = PackedInt(newValue) }
    }
    /// The last `aps.timestamp` sent: the next is always higher.
    public var lastTimestamp: Int64? {
        get { timestamp.value }
        set { timestamp = PackedInt(newValue) }
    }
    /// The state of the last content sent (alerts fire on a change of state).
    public var lastState: String? {
        get { Interned.strings.value(state) }
        set { state = Interned.strings.code(newValue) }
    }
    /// When alerts were sent, within the alert window (at most 16).
    public var alertTimes: [Date] {
        get { alerts.map { Date(timeIntervalSinceReferenceDate: $0) } }
        set { alerts = newValue.map(\.timeIntervalSinceReferenceDate) }
    }
    public var startedAt: Date? {
        get { started.date }
        set { started = PackedDate(newValue) }
    }
    public var ended: Bool {
        get { flags.contains(.ended) }
        set { flags.set(.ended, newValue) }
    }
    /// What is kept of the last request sent: what the phone should show (re-sent when it goes
    /// stale). Its payload is on `islet.push-requests.v1` at ``payloadStoredAt`` once Kafka has it.
    public var latest: LatestRequest? { summary.isNone ? nil : summary }
    /// The latest request in full (payload included), when it is in memory: not yet on Kafka, or
    /// read again from there for the monitor.
    public var latestRequest: PushRequest? { rare.request }
    /// The push-to-start key of the latest request, if it was a push-to-start.
    public var latestPushToStartKey: String? { rare.pushToStartKey }
    /// The push-to-start APNs accepted that started the activity, while the activity's update
    /// token has not come (``ContentEngine/sweep(owned:)`` reports `startUnconfirmed` when it does
    /// not come in time). Set by the start's `delivered` outcome; gone with a new start, the end,
    /// or once the token came.
    public var startWatch: ContentMemoryRecord.StartWatch? {
        get { rare.startWatch }
        set { if newValue != rare.startWatch { withExtras { $0.startWatch = newValue } } }
    }
    /// The activity's broadcast channel (iOS 18), as the dispatcher's latest answer to one of its
    /// broadcasts named it: a push-to-start of the activity to a phone starts it on this channel.
    public var channelId: String? {
        get { rare.channelId }
        set { if newValue != rare.channelId { withExtras { $0.channelId = newValue } } }
    }
    /// The push-to-start key the activity was started with, if it was started by a push.
    public var startedWith: String? {
        get { rare.startedWith }
        set { if newValue != rare.startedWith { withExtras { $0.startedWith = newValue } } }
    }
    /// Where the latest request is on `islet.push-requests.v1` (its payload is read again from there).
    public var payloadStoredAt: KafkaPosition? {
        get { flags.contains(.stored) ? KafkaPosition(partition: storedPartition, offset: storedOffset) : nil }
        set {
            flags.set(.stored, newValue != nil)
            (storedPartition, storedOffset) = (newValue?.partition ?? 0, newValue?.offset ?? 0)
        }
    }
    /// The latest payload could not be found where it was stored (the record expired, the topic
    /// was recreated): the monitor cannot re-send or end the activity until its next request.
    public var payloadLost: Bool {
        get { flags.contains(.payloadLost) }
        set { flags.set(.payloadLost, newValue) }
    }
    /// The request of the latest event's content (re-sends are numbered after it).
    public var contentRequestId: String? {
        get { flags.contains(.contentIsLatest) ? latest?.requestId : rare.contentRequestId }
        set {
            if let newValue, newValue == latest?.requestId {
                flags.insert(.contentIsLatest)
                withExtras { $0.contentRequestId = nil }
            } else {
                flags.remove(.contentIsLatest)
                withExtras { $0.contentRequestId = newValue }
            }
        }
    }
    /// Re-sends of the latest event's content so far, and the last one's time.
    public var resends: Int {
        get { Int(resendCount) }
        set { resendCount = UInt16(clamping: newValue) }
    }
    public var lastResendAt: Date? {
        get { resendAt.date }
        set { resendAt = PackedDate(newValue) }
    }
    /// The activity's token is dead (APNs said so): nothing more is sent to it, until the app
    /// registers it again (``goneAt``, ``goneToken``: APNs's verdict — since when the token is dead —
    /// and the token's fingerprint; both `nil` when the dispatcher ended a request `tokenInvalid`
    /// without asking APNs).
    public var gone: Bool {
        get { flags.contains(.gone) }
        set { flags.set(.gone, newValue) }
    }
    public var goneAt: Date? {
        get { rare.goneAt }
        set { withExtras { $0.goneAt = newValue } }
    }
    public var goneToken: String? {
        get { rare.goneToken }
        set { withExtras { $0.goneToken = newValue } }
    }
    /// The image URLs whose data reached the phone inlined in one of the activity's payloads (APNs
    /// accepted that push): later payloads carry the URL only.
    public var inlinedImages: Set<String> {
        get { rare.inlinedImages }
        set { withExtras { $0.inlinedImages = newValue } }
    }
    /// Images inlined in requests not delivered yet, by request id: they count as inlined once
    /// their request is delivered; coalesced or failed, the next payload inlines them again.
    public var pendingImages: [String: PendingImages] {
        get { rare.pendingImages }
        set { withExtras { $0.pendingImages = newValue } }
    }
    /// The partition of the activity's records: the freshness monitor of the instance that owns it
    /// looks after it.
    public var partition: Int32? {
        get { partitionCode < 0 ? nil : partitionCode }
        set { partitionCode = newValue ?? -1 }
    }

    /// Events scheduled for later (``ActivityEvent/at``), the earliest first: each is sent at its
    /// time unless a newer event (its sequence or above), the end, or a step of the same sequence
    /// supersedes it first.
    public var steps: [ActivityEvent] { rare.steps }

    /// Most steps an activity may have scheduled at once.
    public static let maximumSteps = 8

    /// Keeps `event` for its time, in place of a step with the same sequence (moved or changed).
    mutating func schedule(_ event: ActivityEvent) {
        withExtras { extras in
            extras.steps.removeAll { $0.sequence == event.sequence }
            let at = event.at ?? .distantPast
            let index = extras.steps.firstIndex { ($0.at ?? .distantPast, $0.sequence) > (at, event.sequence) } ?? extras.steps.count
            extras.steps.insert(event, at: index)
        }
    }

    /// Puts back the steps a changelog record holds.
    mutating func restoreSteps(_ events: [ActivityEvent]) {
        for event in events { schedule(event) }
    }

    /// The step of `sequence` lets go (due, and not to be sent: ignored).
    mutating func dropSteps(only sequence: Int64) {
        guard rare.steps.contains(where: { $0.sequence == sequence }) else { return }
        withExtras { extras in extras.steps.removeAll { $0.sequence == sequence } }
    }

    /// Steps superseded: by an event applied with `sequence` (theirs at or below it), or all of
    /// them. An end step whose alerting update `request` is stays: its end is still owed (the
    /// update was written, the end not: ``ContentEngine/endWrittenInPart(_:activityKey:memory:)``).
    mutating func dropSteps(through sequence: Int64? = nil, after request: PushRequest? = nil) {
        guard !rare.steps.isEmpty else { return }
        withExtras { extras in
            extras.steps.removeAll { step in
                guard sequence.map({ step.sequence <= $0 }) ?? true else { return false }
                if let request, step.kind == .end,
                    RequestIds.alertBeforeEnd(bundleId: request.app.bundleId, activityId: step.activityId, eventId: step.eventId) == request.requestId
                {
                    return false
                }
                return true
            }
        }
    }

    /// The dispatcher's answer to one of the activity's requests, if it came: the latest's, or
    /// one that came before its request was read.
    public func outcome(of requestId: String) -> PushResult? {
        if let latest, latest.requestId == requestId { return latestResult == 0 ? nil : Interned.strings.value(latestResult).map(PushResult.init(rawValue:)) }
        return rare.waiting.last { $0.requestId == requestId }?.result
    }

    /// The outcomes remembered (the changelog's), the latest request's first.
    var outcomes: [(requestId: String, result: PushResult, completedAt: Date?)] {
        var all: [(requestId: String, result: PushResult, completedAt: Date?)] = []
        if let latest, let result = outcome(of: latest.requestId) { all.append((latest.requestId, result, nil)) }
        for waiting in rare.waiting { all.append((waiting.requestId, waiting.result, waiting.completedAt)) }
        return all
    }

    /// Where the dispatcher's latest answers to the activity's requests are on
    /// `islet.push-outcomes.v1` (at most ``OutcomePositions/capacity``, the latest first): the
    /// outcomes themselves are read again from there when a backend asks for them.
    public var outcomePositions: [KafkaPosition] {
        get { recentOutcomes.positions }
        set { recentOutcomes = OutcomePositions(newValue) }
    }

    /// The latest request's outcome, if it came.
    var latestOutcome: PushResult? { latest.flatMap { outcome(of: $0.requestId) } }

    // MARK: How it changes

    /// A request read back from `islet.push-requests.v1` (this instance's or another's), or just
    /// made: applied when it is newer than what is remembered, so reading one twice changes nothing.
    /// It is kept in full until Kafka has it (``stored(_:at:)``).
    /// - Parameter scanImages: look for inlined images in the payload (when read back from Kafka;
    ///   the assembler knows what it inlined).
    mutating func replay(_ request: PushRequest, scanImages: Bool = true) {
        if let last = lastTimestamp, request.apnsTimestamp <= last {
            // An equal timestamp (a burst past the lead, or at a new owner's floor: ContentTimestamps)
            // is newer if made later, or at the same instant for a later event, or for the end of
            // the event whose alerting update it follows (both carry the event's timestamp).
            guard request.apnsTimestamp == last, let latest, !latest.isRequest(request.requestId),
                request.createdAt > latest.createdAt
                    || (request.createdAt == latest.createdAt
                        && (request.contentSequence > latest.contentSequence
                            || (request.contentSequence == latest.contentSequence && request.event == .end && latest.event != .end)))
            else { return }
        }
        lastTimestamp = request.apnsTimestamp
        let previousContent = contentRequestId
        summary = LatestRequest(request)
        payloadStoredAt = nil
        payloadLost = false
        // Its outcome, if it was read first; the previous request's is not needed any more.
        let result = withExtras { extras -> PushResult? in
            extras.pushToStartKey = request.pushToStartKey
            if request.event == .start { extras.startedWith = request.pushToStartKey } else if request.event == .end { extras.startedWith = nil }
            if request.event == .start || request.event == .end { extras.startWatch = nil }
            extras.request = request
            extras.waiting.removeAll { request.createdAt.timeIntervalSince($0.completedAt) > Self.waitingLifetime }
            return extras.waiting.lastIndex { $0.requestId == request.requestId }.map { extras.waiting.remove(at: $0).result }
        }
        latestResult = Interned.strings.code(result?.rawValue)
        if let state = request.state { lastState = state }
        if request.sourceEventId != nil {
            lastSequence = max(lastSequence ?? request.contentSequence, request.contentSequence)
            // Steps the content supersedes (an event at or above their sequence, or one of them sent).
            dropSteps(through: request.contentSequence, after: request)
            contentRequestId = request.requestId
            resends = 0
            lastResendAt = nil
        } else {
            contentRequestId = previousContent
            if request.event == .update {
                resends += 1
                lastResendAt = request.createdAt
            }
        }
        if request.alerting {
            alerts.append(request.createdAt.timeIntervalSinceReferenceDate)
            if alerts.count > 16 { alerts.removeFirst(alerts.count - 16) }
        }
        if request.event == .start {
            startedAt = request.createdAt
            ended = false
            gone = false
        } else if startedAt == nil {
            startedAt = request.createdAt
        }
        if request.event == .end {
            ended = true
            dropSteps()
        }
        if scanImages { noteInlinedImages(of: request) }
    }

    /// The images the request's payload inlined: the app has them once it is delivered. Outcomes
    /// that never came (their request read back, their outcome not) count as delivered, as most
    /// are, rather than inlined again for ever.
    private mutating func noteInlinedImages(of request: PushRequest) {
        if request.payload.utf8.count > 1_500, Self.contains(request.payload.utf8, #""data":"#.utf8) {
            let urls = Self.inlinedImageURLs(in: request.payload).subtracting(inlinedImages)
            switch latestOutcome {
            case .delivered?, .deliveredDowngraded?: inlinedImages.formUnion(urls)  // its outcome was read first
            case .some: break
            case nil: if !urls.isEmpty { pendingImages[request.requestId] = PendingImages(urls: urls, since: request.createdAt) }
            }
        }
        if !rare.pendingImages.isEmpty {
            withExtras { extras in
                for (id, pending) in extras.pendingImages where request.createdAt.timeIntervalSince(pending.since) > Self.pendingLifetime {
                    extras.inlinedImages.formUnion(pending.urls)
                    extras.pendingImages[id] = nil
                }
            }
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
    /// Not after `failed`: its answer was unknown, and it may have started the activity. Never
    /// after a start to every device of a user: another device may have it.
    var startNeverArrived: Bool {
        guard let latest, latest.isPushToStart, !latest.isUserStart, let result = latestOutcome else { return false }
        return [.rejected, .expired, .awaitingToken, .tokenInvalid, .coalesced].contains(result)
    }

    /// `requestId` is on `islet.push-requests.v1` at `position`: when it is the latest request, it
    /// is not kept in full any more.
    mutating func stored(_ requestId: String, at position: KafkaPosition) {
        guard let latest, latest.isRequest(requestId), rare.request != nil else { return }
        withExtras { $0.request = nil }
        payloadStoredAt = position
    }

    /// The latest request, read again from where it is stored.
    mutating func restoreRequest(_ request: PushRequest, from position: KafkaPosition) {
        guard payloadStoredAt == position, rare.request == nil, latest?.isRequest(request.requestId) == true else { return }
        withExtras { $0.request = request }
    }

    /// The latest request was not found where it was stored.
    mutating func losePayload(at position: KafkaPosition) {
        guard payloadStoredAt == position, rare.request == nil else { return }
        payloadLost = true
    }

    /// The latest request is not in memory: read it at this position to re-send it.
    var payloadToRead: KafkaPosition? { rare.request == nil && !payloadLost ? payloadStoredAt : nil }

    /// The dispatcher's final answer to one of the activity's requests, stored at `position` on
    /// `islet.push-outcomes.v1` when it was read from there.
    mutating func record(_ outcome: PushOutcome, at position: KafkaPosition? = nil) {
        if let position { recentOutcomes.insert(position) }
        // One of the activity's broadcasts reached this channel: the activity's channel (a newer
        // one after the dispatcher made it again). APNs said it is gone: none until the next one
        // is made. (Outcomes of one activity come in order, from its partition.)
        if let channel = outcome.channelId, outcome.activityId != nil, outcome.pushToStartKey == nil {
            if outcome.result == .delivered || outcome.result == .deliveredDowngraded {
                channelId = channel
            } else if channel == channelId, outcome.apns?.saysChannelIsGone == true {
                channelId = nil
            }
        }
        let isLatest = latest?.isRequest(outcome.requestId) == true
        if isLatest {
            latestResult = Interned.strings.code(outcome.result.rawValue)
        } else {
            withExtras { extras in
                extras.waiting.removeAll {
                    $0.requestId == outcome.requestId || outcome.completedAt.timeIntervalSince($0.completedAt) > Self.waitingLifetime
                }
                extras.waiting.append(WaitingOutcome(requestId: outcome.requestId, result: outcome.result, completedAt: outcome.completedAt))
                if extras.waiting.count > Self.waitingLimit { extras.waiting.removeFirst(extras.waiting.count - Self.waitingLimit) }
            }
        }
        if isLatest, let latest, latest.isPushToStart, latest.event == .start, rare.startWatch == nil,
            outcome.result == .delivered || outcome.result == .deliveredDowngraded, let key = outcome.pushToStartKey ?? rare.pushToStartKey
        {
            startWatch = .init(requestId: outcome.requestId, pushToStartKey: key, tokenFingerprint: outcome.tokenFingerprint, deliveredAt: outcome.completedAt)
        } else if outcome.result == .startUnconfirmed, var watch = rare.startWatch, watch.requestId == outcome.requestId, watch.reportedAt == nil {
            watch.reportedAt = outcome.completedAt
            startWatch = watch
        }
        if rare.pendingImages[outcome.requestId] != nil {
            withExtras { extras in
                if let images = extras.pendingImages.removeValue(forKey: outcome.requestId),
                    outcome.result == .delivered || outcome.result == .deliveredDowngraded
                {
                    extras.inlinedImages.formUnion(images.urls)
                }
            }
        }
        if outcome.result == .tokenInvalid, isLatest, latest?.isPushToStart == false {
            if let verdict = TokenVerdict(outcome) {
                // APNs's verdict, judged by the one rule (``TokenVerdict``): since APNs's time, not
                // when it was read (a registration made between the two is alive).
                gone = true
                goneAt = verdict.since
                goneToken = verdict.fingerprint
            } else if !gone {
                // Ended without asking APNs (the dispatcher's table said the token is invalidated):
                // no verdict to judge by; the token table's next active record revives it.
                gone = true
                goneAt = nil
                goneToken = nil
            }
        } else if outcome.result == .delivered || outcome.result == .deliveredDowngraded, isLatest {
            gone = false
        }
    }

    /// Puts back an outcome from the changelog (the latest request's, or one waiting for its request).
    mutating func restoreOutcome(requestId: String, result: PushResult, completedAt: Date?) {
        if latest?.isRequest(requestId) == true {
            latestResult = Interned.strings.code(result.rawValue)
        } else {
            withExtras { $0.waiting.append(WaitingOutcome(requestId: requestId, result: result, completedAt: completedAt ?? .distantPast)) }
        }
    }

    /// Puts back what the changelog holds of the latest request.
    mutating func restoreLatest(_ latest: LatestRequest, pushToStartKey: String?) {
        summary = latest
        withExtras { $0.pushToStartKey = pushToStartKey }
    }
}
