import Foundation
import IsletKafka
import IsletMessages

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
    /// The last request sent: what the phone should show (re-sent when it goes stale). Once it is
    /// on `islet.push-requests.v1` its payload is not kept (``payloadStoredAt``): it is read again
    /// from there the few times it is needed (a re-send, the end the monitor sends).
    public var latest: PushRequest?
    /// Where ``latest`` is on `islet.push-requests.v1`, when its payload was dropped (empty).
    public var payloadStoredAt: KafkaPosition?
    /// The latest payload could not be found where it was stored (the record expired, the topic
    /// was recreated): the monitor cannot re-send or end the activity until its next request.
    public var payloadLost = false
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
        payloadStoredAt = nil
        payloadLost = false
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

    /// `requestId` is on `islet.push-requests.v1` at `position`: when it is the latest request, its
    /// payload need not be kept any more.
    mutating func stored(_ requestId: String, at position: KafkaPosition) {
        guard latest?.requestId == requestId, latest?.payload.isEmpty == false else { return }
        latest?.payload = ""
        payloadStoredAt = position
    }

    /// The latest request's payload, read again from where it is stored.
    mutating func restorePayload(_ payload: String, from position: KafkaPosition) {
        guard payloadStoredAt == position, latest?.payload.isEmpty == true else { return }
        latest?.payload = payload
    }

    /// The latest request's payload was not found where it was stored.
    mutating func losePayload(at position: KafkaPosition) {
        guard payloadStoredAt == position, latest?.payload.isEmpty == true else { return }
        payloadLost = true
    }

    /// The latest request's payload is not in memory: read it at this position to re-send it.
    var payloadToRead: KafkaPosition? { latest?.payload.isEmpty == true && !payloadLost ? payloadStoredAt : nil }

    /// The dispatcher's final answer to one of the activity's requests.
    mutating func record(_ outcome: PushOutcome) {
        // Room for a new one (an outcome read again, after a restore from the changelog, takes none).
        if outcomes[outcome.requestId] == nil, outcomes.count >= 8, let oldest = outcomes.keys.first(where: { $0 != latest?.requestId }) {
            outcomes[oldest] = nil
        }
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
