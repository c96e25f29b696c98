import Foundation
import IsletMessages
import IsletTokens
import Synchronization

/// Decides what each domain event becomes: ignored (a duplicate or out-of-order sequence, or an
/// activity that has ended), refused (it does not fit its template), or push requests for the app
/// version its token was registered with. The activity's memory moves on only once the requests
/// are persisted (``commit(_:)``): a failed send leaves the event to be handled again.
///
/// It also watches what it sent (the freshness monitor, ``sweep()``): content gone stale is sent
/// again, an activity stale for too long or near iOS's 8-hour limit is ended.
///
/// ``prepare(_:)``/``commit(_:)`` and ``sweep()``/``commit(_:)`` pairs must not interleave for one
/// activity: ``ContentServiceLoop`` runs them one at a time.
public final class ContentEngine: Sendable {
    public let assembler: PayloadAssembler
    public let freshness: FreshnessPolicy
    private let tokens: TokenTable
    private struct State {
        /// By activity of its app (`<bundleId>/<activityId>`: activity ids are scoped per app).
        var memories: [String: ActivityMemory] = [:]
        /// Push-to-start keys of recent starts → the activity they started (their outcomes carry the key).
        var startOwners: [String: String] = [:]
        /// Activity id → the keys of the memories of that id (one per app that uses it).
        var keysByActivity: [String: Set<String>] = [:]

        /// Sets (or, with `nil`, forgets) the memory of `key`, keeping the index by activity id.
        mutating func set(_ key: String, _ memory: ActivityMemory?) {
            let activityId = String(key.drop { $0 != "/" }.dropFirst())
            memories[key] = memory
            if memory == nil {
                keysByActivity[activityId]?.remove(key)
                if keysByActivity[activityId]?.isEmpty == true { keysByActivity[activityId] = nil }
            } else {
                keysByActivity[activityId, default: []].insert(key)
            }
        }
    }
    private let state = Mutex(State())
    /// What the engine takes for now (timestamps, stale dates, the freshness monitor).
    let clock: any WallClock

    public init(
        assembler: PayloadAssembler, tokens: TokenTable, freshness: FreshnessPolicy = FreshnessPolicy(),
        clock: any WallClock = SystemWallClock()
    ) {
        self.assembler = assembler
        self.tokens = tokens
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
        var memory = state.withLock { $0.memories[activityKey] } ?? ActivityMemory()
        if let partition { memory.partition = partition }
        // An event that is not applied is still checked: a caller (gRPC) learns that it is invalid.
        var ignored: String?
        if let last = memory.lastSequence, event.sequence <= last {
            ignored = event.sequence == last ? "duplicate sequence \(event.sequence)" : "sequence \(event.sequence) is older than \(last)"
        } else if memory.ended, event.kind != .start {
            ignored = "the activity has ended"
        } else if event.kind == .start, memory.isLive, !memory.startNeverArrived {
            // A second start would put a second Live Activity on the phone (a push-to-start) or
            // restart one that is running: end it first.
            throw ContentError(field: "kind", problem: "the activity is live (started, not ended): end it before starting it again")
        }
        // The token tells the app's environment and version; without one, the push-to-start
        // target's or the template's app.
        let key: String
        if let target = event.startTarget {
            key = MessageKey.pushToStart(bundleId: target.app.bundleId, deviceId: target.deviceId, attributesType: event.attributesType)
        } else {
            key = activityKey
        }
        let record = tokens.record(forKey: key)
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
        let version = record.flatMap { AppVersion($0.appVersion) } ?? Self.newest
        let result = try assembler.assemble(event, app: app, appVersion: version, memory: &memory, now: clock.date, images: images)
        if let ignored { return .ignore(ignored) }
        return .send(Prepared(requests: result.requests, shrinks: result.shrinks, activityKey: activityKey, memory: memory))
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
        var keys = Set(tokens.keys(forActivity: event.activityId).filter { tokens.record(forKey: $0)?.state == .active })
        state.withLock { state in
            for key in state.keysByActivity[event.activityId] ?? [] where state.memories[key]?.isLive == true { keys.insert(key) }
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
        state.withLock { state in
            state.set(prepared.activityKey, prepared.memory)
            for request in prepared.requests { if let key = request.pushToStartKey { state.startOwners[key] = prepared.activityKey } }
        }
    }

    /// A request read back from `islet.push-requests.v1`: the memory of its activity catches up
    /// (after a restart, or when another instance handled the activity before).
    /// - Parameter partition: the partition it was read from.
    public func replay(_ request: PushRequest, partition: Int32? = nil) {
        guard let activityKey = request.activityKey else { return }
        state.withLock { state in
            var memory = state.memories[activityKey] ?? ActivityMemory()
            memory.replay(request)
            // Requests to a running activity are partitioned like its events (by activity id).
            if let partition, request.activityId != nil { memory.partition = partition }
            state.set(activityKey, memory)
            if let key = request.pushToStartKey { state.startOwners[key] = activityKey }
        }
    }

    /// The dispatcher's final answer to a request.
    public func record(_ outcome: PushOutcome) {
        state.withLock { state in
            let activityKey: String?
            if let activityId = outcome.activityId, outcome.bundleId == nil {
                // Written before outcomes named their app: the only app remembered with the id.
                let keys = state.keysByActivity[activityId] ?? []
                activityKey = keys.count == 1 ? keys.first : nil
            } else if outcome.activityId == nil {
                activityKey = outcome.pushToStartKey.flatMap { state.startOwners[$0] }
            } else {
                activityKey = outcome.key
            }
            guard let activityKey else { return }
            state.memories[activityKey]?.record(outcome)
        }
    }

    /// The freshness monitor's pass: for each live activity, what to send by itself — its latest
    /// content again when stale (at most ``FreshnessPolicy/maximumResends`` times, spaced), its
    /// end when severely stale or at the end of its lifetime. Forgets activities not heard of
    /// within the retention. Send the results, then ``commit(_:)`` each.
    /// - Parameter owned: the partitions this instance owns (`nil`: all); other instances look
    ///   after the rest.
    public func sweep(owned: Set<Int32>? = nil) -> [Prepared] {
        let now = clock.date
        let policy = freshness
        return state.withLock { state -> [Prepared] in
            var prepared: [Prepared] = []
            for (activityKey, var memory) in state.memories {
                guard let latest = memory.latest else { continue }
                if let owned, !(memory.partition.map(owned.contains) ?? false) { continue }
                if memory.gone, Self.registeredAgain(memory, token: tokens.record(forKey: activityKey)) {
                    // The app registered a token after APNs's verdict (a new one, or the same
                    // again): the activity is watched again.
                    memory.gone = false
                    state.memories[activityKey] = memory
                }
                if !memory.isLive {
                    if now.timeIntervalSince(latest.createdAt) > policy.retention / .seconds(1) { state.set(activityKey, nil) }
                    continue
                }
                let followUp: FollowUp
                if let started = memory.startedAt, now.timeIntervalSince(started) >= policy.lifetime / .seconds(1) {
                    followUp = .end(.lifetimeExceeded)
                } else {
                    switch memory.freshness(now: now, policy: policy) {
                    case .severelyStale?:
                        followUp = .end(.severelyStale)
                    case .staleRecoverable?:
                        guard memory.resends < policy.maximumResends else { continue }
                        if let last = memory.lastResendAt, now.timeIntervalSince(last) < policy.resendSpacing / .seconds(1) { continue }
                        followUp = .resend
                    case .fresh?, nil:
                        continue
                    }
                }
                let requestId = followUp == .resend
                    ? RequestIds.resend(of: memory.contentRequestId ?? latest.requestId, number: memory.resends + 1)
                    : RequestIds.end(after: latest.requestId)
                let timestamp = max((memory.lastTimestamp ?? 0) + 1, Int64(now.timeIntervalSince1970.rounded(.down)))
                guard let request = assembler.followUp(followUp, of: latest, requestId: requestId, timestamp: timestamp, now: now) else { continue }
                var next = memory
                next.replay(request)
                var item = Prepared(requests: [request], shrinks: [], activityKey: activityKey, memory: next)
                if case .end(let reason) = followUp { item.invalidation = reason }
                prepared.append(item)
            }
            if state.startOwners.count > state.memories.count {
                state.startOwners = state.startOwners.filter { state.memories[$0.value] != nil }
            }
            return prepared
        }
    }

    /// Whether the activity's token, declared dead, was registered since: an active record with
    /// another token, or registered after the verdict.
    static func registeredAgain(_ memory: ActivityMemory, token record: TokenRecord?) -> Bool {
        guard let record, record.state == .active else { return false }
        if let dead = memory.goneToken, dead != TokenFingerprint.of(token: record.token) { return true }
        return record.registeredAt > (memory.goneAt ?? .distantFuture)
    }

    /// The live activities that are not fresh, most stale first.
    public func staleActivities(limit: Int = 1_000) -> [StaleActivity] {
        let now = clock.date
        let policy = freshness
        let stale = state.withLock { state in
            state.memories.compactMap { activityKey, memory -> StaleActivity? in
                guard let freshness = memory.freshness(now: now, policy: policy), freshness != .fresh,
                    let since = memory.staleSince(now: now), let latest = memory.latest
                else { return nil }
                return StaleActivity(
                    activityId: latest.sourceActivityId ?? latest.activityId ?? String(activityKey.drop { $0 != "/" }.dropFirst()),
                    bundleId: latest.app.bundleId, attributesType: latest.attributesType, freshness: freshness, staleSince: since,
                    contentSequence: latest.contentSequence, resends: memory.resends)
            }
        }
        return Array(
            stale.sorted { ($0.staleSince, $0.bundleId, $0.activityId) < ($1.staleSince, $1.bundleId, $1.activityId) }.prefix(limit))
    }

    /// Live activities per freshness class (for /metrics).
    public func freshnessCounts() -> [Freshness: Int] {
        let now = clock.date
        let policy = freshness
        return state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: Freshness.allCases.map { ($0, 0) })
            for memory in state.memories.values { if let class_ = memory.freshness(now: now, policy: policy) { counts[class_, default: 0] += 1 } }
            return counts
        }
    }

    /// The dispatcher's final outcome of one of the activity's recent requests, if it came.
    public func outcome(of requestId: String, activityKey: String) -> PushResult? {
        state.withLock { $0.memories[activityKey]?.outcomes[requestId] }
    }

    /// What is remembered of an activity, by its key (`<bundleId>/<activityId>`; tests, diagnostics).
    public func memory(of activityKey: String) -> ActivityMemory? { state.withLock { $0.memories[activityKey] } }

    /// Activities remembered.
    public var activityCount: Int { state.withLock { $0.memories.count } }
}
