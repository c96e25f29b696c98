import Foundation
import IsletKafka
import HeapModule
import IsletMessages
import IsletTokens
import Synchronization

/// Decides what each domain event becomes: ignored (a duplicate or out-of-order sequence, or an
/// activity that has ended), refused (it does not fit its template), or push requests for the app
/// version its token was registered with. The activity's memory moves on only once the requests
/// are persisted (``commit(_:)``): a failed send leaves the event to be handled again.
///
/// It also watches what it sent (the freshness monitor, ``sweep()``): content gone stale is sent
/// again, an activity stale for too long or near iOS's 8-hour limit is ended. The monitor's work is
/// proportional to what is due, not to the activities remembered: each activity waits in a queue
/// ordered by its next deadline (``ActivityMemory/nextDeadline(now:policy:)``), and the freshness
/// classes are kept up to date as activities change or fall due.
///
/// ``prepare(_:)``/``commit(_:)`` and ``sweep()``/``commit(_:)`` pairs must not interleave for one
/// activity: ``ContentServiceLoop`` runs an activity's events one at a time in its lane, and a
/// sweep when no lane works (pairs of different activities may run at once).
public final class ContentEngine: Sendable {
    public let assembler: PayloadAssembler
    public let freshness: FreshnessPolicy
    let tokens: PartitionTokens
    let state: Mutex<ActivityMemories>
    /// What the engine takes for now (timestamps, stale dates, the freshness monitor).
    let clock: any WallClock

    public init(
        assembler: PayloadAssembler, tokens: PartitionTokens, freshness: FreshnessPolicy = FreshnessPolicy(),
        clock: any WallClock = SystemWallClock()
    ) {
        self.assembler = assembler
        self.tokens = tokens
        self.state = Mutex(ActivityMemories(heldKey: { [tokens] in tokens.heldKey($0) }))
        self.freshness = freshness
        self.clock = clock
    }

    public enum Decision: Sendable {
        /// Send these, then ``commit(_:)`` the prepared memory.
        case send(Prepared)
        /// Nothing to send, and why (counted, and the event marked processed).
        case ignore(String)
    }

    /// Requests ready to be sent, and the activity's memory once they are.
    public struct Prepared: Sendable {
        public var requests: [PushRequest]
        public var shrinks: [String]
        /// The activity, of its app (`<bundleId>/<activityId>`).
        public let activityKey: String
        let memory: ActivityMemory
        /// The freshness monitor ended the activity by itself, for this reason: its token is to be
        /// invalidated in token-registry once the end is persisted.
        public var invalidation: InvalidationReason? = nil
    }

    /// An app version newer than any: when the activity's version is unknown every field is sent
    /// (extra fields are ignored by the app's decoder; a missing one would break it).
    static let newest = AppVersion("999999")!

    /// - Parameter partition: the partition the event was read from (its activity's partition).
    /// - Parameter images: thumbnails by image URL (``ThumbnailService``); without, images go by URL only.
    public func prepare(_ event: ActivityEvent, partition: Int32? = nil, images: [String: [String]] = [:]) throws(ContentError) -> Decision {
        guard let template = assembler.templates[event.attributesType] else {
            throw ContentError(field: "attributesType", problem: "\(event.attributesType) has no template")
        }
        let activityKey = try activityKey(of: event)
        var memory = state.withLock { $0.memory(activityKey) } ?? ActivityMemory()
        if let partition { memory.partition = partition }
        // An event that is not applied is still checked: a caller (gRPC) learns that it is invalid.
        let writtenInPart = Self.endWrittenInPart(event, activityKey: activityKey, memory: memory)
        let ignored = try Self.whyIgnored(event, memory: memory, endWrittenInPart: writtenInPart != nil)
        let (key, record, app) = try target(of: event, activityKey: activityKey, template: template, memory: memory)
        let version = record.flatMap { AppVersion($0.appVersion) } ?? Self.newest
        let floor = memory.partition.flatMap { partition in state.withLock { $0.timestampFloors[partition] } }
        // The registration the content is made for, when it is the request's own key's (not the
        // push-to-start token standing in for the activity's own, not yet read).
        let registeredAt = template.broadcastStoragePolicy == nil ? tokens.token(forKey: key).map(\.registeredAt) : nil
        let result = try assembler.assemble(
            event, app: app, appVersion: version, locale: record?.locale, memory: &memory, now: clock.date, images: images, timestampFloor: floor,
            tokenRegisteredAt: registeredAt)
        if let ignored { return .ignore(ignored) }
        return .send(Prepared(requests: result.requests.filter { $0.requestId != writtenInPart }, shrinks: result.shrinks, activityKey: activityKey, memory: memory))
    }

    /// An end whose alerting update was written and the end not (its writer stopped between
    /// the two, or Kafka refused the end while the partition moved): the event is read again
    /// by the next owner, whose memory has its sequence from the update (and its content, also
    /// when the freshness monitor sent it again since). The end is still owed; the update's
    /// request id is returned (not sent again).
    static func endWrittenInPart(_ event: ActivityEvent, activityKey: String, memory: ActivityMemory) -> String? {
        guard event.kind == .end, !memory.ended, memory.lastSequence == event.sequence else { return nil }
        let alert = RequestIds.alertBeforeEnd(bundleId: String(activityKey.prefix { $0 != "/" }), activityId: event.activityId, eventId: event.eventId)
        return memory.contentRequestId == alert ? alert : nil
    }

    /// Why the event is not applied (`nil`: it is): a duplicate or older sequence, an activity
    /// ended. Throws for a start of a live activity.
    static func whyIgnored(_ event: ActivityEvent, memory: ActivityMemory, endWrittenInPart: Bool) throws(ContentError) -> String? {
        if !endWrittenInPart, let last = memory.lastSequence, event.sequence <= last {
            return event.sequence == last ? "duplicate sequence \(event.sequence)" : "sequence \(event.sequence) is older than \(last)"
        } else if memory.ended, event.kind != .start {
            return "the activity has ended"
        } else if event.kind == .start, memory.isLive, !memory.startNeverArrived {
            // A second start would put a second Live Activity on the phone (a push-to-start) or
            // restart one that is running: end it first.
            throw ContentError(field: "kind", problem: "the activity is live (started, not ended): end it before starting it again")
        }
        return nil
    }

    /// Whom the event's requests are for: the key of its token (the activity's, or the
    /// push-to-start target's), that token if known, and the app.
    private func target(of event: ActivityEvent, activityKey: String, template: ActivityTemplate, memory: ActivityMemory) throws(ContentError)
        -> (key: String, record: DeliveryToken?, app: AppTarget)
    {
        // The token tells the app's environment and version; without one, the push-to-start
        // target's or the template's app.
        let key: String
        if let target = event.startTarget {
            key = MessageKey.pushToStart(bundleId: target.app.bundleId, deviceId: target.deviceId, attributesType: event.attributesType)
        } else {
            key = activityKey
        }
        // A broadcast goes to no token: one payload for every phone, for the newest app version in
        // the default language. An activity started by a push whose own token is not read yet (the
        // app registers it right after the start; the backend's first update may come first): the
        // push-to-start token's app, version and locale, the same phone's.
        let record = template.broadcastStoragePolicy == nil
            ? tokens.token(forKey: key) ?? memory.startedWith.flatMap { tokens.token(forKey: $0) } : nil
        let bundleId = String(activityKey.prefix { $0 != "/" })
        // Without a token yet: the push-to-start target's app, else the app of what was last sent
        // (a remote start's), else the template's when it is that app.
        guard let app = record?.app ?? event.startTarget?.app ?? memory.latest?.app
                ?? template.app.flatMap({ $0.bundleId == bundleId ? $0 : nil })
        else {
            throw ContentError(
                field: "activityId",
                problem: "no token is registered for it in \(bundleId), and template \(template.attributesType) names \(template.app.map { "another app (\($0.bundleId))" } ?? "no app")")
        }
        return (key, record, app)
    }

    /// The activity an event is about, of its app (`<bundleId>/<activityId>`; activity ids are
    /// scoped per app). The app is the event's `bundleId`, else its push-to-start target's. An
    /// event without either (written before events named their app) goes to the only app that
    /// has the id live — an active token registered for it, or a live activity this service
    /// remembers — else to its template's app; when several apps have it, it is refused: the
    /// event must name its app (a guess could show one user's order on another's phone).
    public func activityKey(of event: ActivityEvent) throws(ContentError) -> String {
        if let bundleId = event.bundleId ?? event.startTarget?.app.bundleId {
            return MessageKey.activity(bundleId: bundleId, activityId: event.activityId)
        }
        let tokens = self.tokens
        var keys = Set(tokens.keys(forActivity: event.activityId).filter { tokens.token(forKey: $0)?.state == .active })
        state.withLock { state in
            for key in state.keys(ofActivity: event.activityId) where state.memory(key)?.isLive == true { keys.insert(key) }
        }
        if keys.count > 1 {
            throw ContentError(
                field: "bundleId",
                problem: "the activity id is live in several apps (\(keys.sorted().map { String($0.prefix { $0 != "/" }) }.joined(separator: ", "))): the event must name its app")
        }
        if let key = keys.first { return key }
        guard let app = assembler.templates[event.attributesType]?.app else {
            throw ContentError(
                field: "bundleId", problem: "the event names no app, no app has the activity live, and template \(event.attributesType) names no app")
        }
        return MessageKey.activity(bundleId: app.bundleId, activityId: event.activityId)
    }

    /// The prepared requests are persisted: the activity's memory moves on.
    public func commit(_ prepared: Prepared) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            state.set(prepared.activityKey, prepared.memory, now: now, policy: policy)
            for request in prepared.requests { if let key = request.pushToStartKey { state.startOwners[key] = prepared.activityKey } }
        }
    }

    /// A request read back from `islet.push-requests.v1`: the memory of its activity catches up
    /// (after a restart, or when another instance handled the activity before).
    /// - Parameter partition: the partition of the activity's records (for a request to a running
    ///   activity, the one it was read from; a push-to-start request's is its activity id's).
    /// - Parameter storedAt: where it was read (its payload is then not kept: read there again when needed).
    public func replay(_ request: PushRequest, partition: Int32? = nil, storedAt: KafkaPosition? = nil) {
        guard let activityKey = request.activityKey else { return }
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            var memory = state.memory(activityKey) ?? ActivityMemory()
            memory.replay(request)
            if let storedAt { memory.stored(request.requestId, at: storedAt) }
            if let partition { memory.partition = partition }
            state.set(activityKey, memory, now: now, policy: policy)
            if let key = request.pushToStartKey { state.startOwners[key] = activityKey }
        }
    }

    /// A request this service sent is on `islet.push-requests.v1` at `position` (Kafka acknowledged
    /// it): when it is still its activity's latest, its payload is not kept any more.
    public func stored(_ request: PushRequest, at position: KafkaPosition) {
        guard let activityKey = request.activityKey else { return }
        state.withLock { state in
            guard let slot = state.index[activityKey].map(Int.init) else { return }
            state.slots[slot].memory.stored(request.requestId, at: position)
            state.unwritten(activityKey, partition: state.slots[slot].memory.partition)
        }
    }

    /// A latest payload the monitor needs, and where it is.
    public struct PayloadToRead: Sendable, Equatable {
        public var activityKey: String
        public var position: KafkaPosition
        /// The request stored there (anything else found there is not its payload).
        public var requestId: String
    }

    /// The payloads the last ``sweep(owned:)`` needed and did not have, the activity longest due
    /// first (they stay due): read them (``RequestPayloads``), hand them to
    /// ``restorePayloads(_:lost:)``, and sweep again.
    public func takePayloadsToRead() -> [PayloadToRead] {
        state.withLock { state in
            defer { state.payloadsToRead = [] }
            return state.payloadsToRead
        }
    }

    /// Payloads read again, by activity: each activity whose latest request is still the one read
    /// has its payload back, until its next request. `lost`: not where they were stored; the
    /// monitor stops asking for them (until the activity's next request).
    public func restorePayloads(_ payloads: [String: (position: KafkaPosition, request: PushRequest)], lost: [PayloadToRead] = []) {
        state.withLock { state in
            for (activityKey, read) in payloads {
                guard let slot = state.index[activityKey].map(Int.init) else { continue }
                state.slots[slot].memory.restoreRequest(read.request, from: read.position)
            }
            for item in lost {
                guard let slot = state.index[item.activityKey].map(Int.init) else { continue }
                state.slots[slot].memory.losePayload(at: item.position)
                state.unwritten(item.activityKey, partition: state.slots[slot].memory.partition)
            }
        }
    }

    /// The dispatcher's final answer to a request, and where it is on `islet.push-outcomes.v1`
    /// when it was read from there.
    public func record(_ outcome: PushOutcome, at position: KafkaPosition? = nil) {
        // A record that is not final (an announcement, a retry's note) is the dispatcher's note to
        // itself: the request's outcome is still to come.
        guard outcome.result.isFinal else { return }
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            let activityKey: String?
            if let activityId = outcome.activityId, outcome.bundleId == nil {
                // Written before outcomes named their app: the only app remembered with the id.
                let keys = state.keys(ofActivity: activityId)
                activityKey = keys.count == 1 ? keys.first : nil
            } else if outcome.activityId == nil {
                activityKey = outcome.pushToStartKey.flatMap { state.startOwners[$0] }
            } else {
                activityKey = outcome.key
            }
            // A failed or expired delivery makes the content stale at once; a delivered one may
            // revive an activity whose token was declared dead: scheduled again either way.
            guard let activityKey else { return }
            state.update(activityKey, now: now, policy: policy) { $0.record(outcome, at: position) }
        }
    }

}
