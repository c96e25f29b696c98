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
    private let tokens: PartitionTokens
    private struct State {
        /// The memories, one per slot; ``index`` finds an activity's slot by its key
        /// (`<bundleId>/<activityId>`: activity ids are scoped per app). A forgotten activity's
        /// slot is reused. About 200 bytes an activity with its key and deadline, where a
        /// dictionary of memories held by key took more than 900 (issue 24).
        var index: [String: Int32] = [:]
        var slots: [Slot] = []
        var freeSlots: [Int32] = []
        /// Memories per app (`bundleId`): an event or outcome that does not name its app is looked
        /// up in each (they are few).
        var apps: [String: Int] = [:]
        /// Push-to-start keys of recent starts → the activity they started (their outcomes carry the key).
        var startOwners: [String: String] = [:]
        /// `startOwners.count` when it was last pruned: pruned again once it doubled (amortised).
        var startOwnersPruned = 0
        /// When the monitor is to look at each activity next.
        var deadlines = DeadlineQueue()
        /// The live activities that were not fresh when last looked at, and their class. Exact as
        /// long as the clock does not step back: a class changes by time alone only at a deadline.
        var notFresh: [Int32: Freshness] = [:]
        var notFreshCounts: [Freshness: Int] = [:]
        /// Activities remembered live (``ActivityMemory/isLive``: not ended, token alive).
        var liveCount = 0
        /// Activities whose token is dead (``ActivityMemory/gone``). No deadline revives them (a token
        /// registered again does, which no clock tells): each monitor pass asks the token table about
        /// the ones it owns. They are few (APNs declared their token dead, within the retention).
        var gone: Set<Int32> = []
        /// Activities the last monitor pass looked at (tests: a pass is proportional to what is due).
        var examinedInLastSweep = 0
        /// The partitions the last sweep was given (`nil`: all), if there was one.
        var lastOwned: Set<Int32>?
        var swept = false
        /// Activities the monitor has something to send for whose latest request is not in memory,
        /// in the order they fell due (the oldest first).
        var payloadsToRead: [PayloadToRead] = []
        /// The activities whose memory changed since it was last written to the changelog
        /// (``ChangelogWriter``), by partition: of the partitions this instance owns
        /// (``own(_:)``; `nil`: of every partition).
        var unwritten = PartitionChanges<String>()
        /// The least timestamp of each partition this instance was assigned (``ContentTimestamps``):
        /// past what its previous owner can have stamped.
        var timestampFloors: [Int32: Int64] = [:]
        /// The key as the token table holds it, if it does: a new memory's key shares its storage.
        let heldKey: @Sendable (String) -> String?

        struct Slot {
            /// Empty when the slot is free.
            var key: String
            var memory: ActivityMemory
        }

        func memory(_ key: String) -> ActivityMemory? { index[key].map { slots[Int($0)].memory } }

        /// The keys of the memories of `activityId`, one per app that has it.
        func keys(ofActivity activityId: String) -> [String] {
            apps.keys.compactMap { bundleId in
                let key = MessageKey.activity(bundleId: bundleId, activityId: activityId)
                return index[key] == nil ? nil : key
            }
        }

        /// Every memory, with its key and slot.
        var all: some Sequence<(key: String, slot: Int32, memory: ActivityMemory)> {
            slots.lazy.enumerated().filter { !$0.element.key.isEmpty }.map { ($0.element.key, Int32($0.offset), $0.element.memory) }
        }

        mutating func unwritten(_ key: String, partition: Int32?) {
            unwritten.note(key, partition: partition)
        }

        /// Sets (or, with `nil`, forgets) the memory of `key`, keeping the index, the apps, the live
        /// and gone activities, the freshness classes, and the activity's deadline.
        /// - Parameter restored: read from the changelog (not to be written there again).
        mutating func set(_ key: String, _ memory: ActivityMemory?, now: Date, policy: FreshnessPolicy, restored: Bool = false) {
            let previous: ActivityMemory?
            let slot: Int32
            if let existing = index[key] {
                slot = existing
                previous = slots[Int(slot)].memory
            } else if memory != nil {
                // (Byte for byte: `==` on strings is canonical equivalence, and the key goes to Kafka.)
                let key = heldKey(key).flatMap { $0.utf8.elementsEqual(key.utf8) ? $0 : nil } ?? key
                if let free = freeSlots.popLast() {
                    slot = free
                    slots[Int(slot)].key = key
                } else {
                    slot = Int32(slots.count)
                    slots.append(Slot(key: key, memory: ActivityMemory()))
                }
                index[key] = slot
                apps[String(key.prefix { $0 != "/" }), default: 0] += 1
                previous = nil
            } else {
                return
            }
            if !restored { unwritten(key, partition: memory?.partition ?? previous?.partition) }
            changed(slot, memory, wasLive: previous?.isLive == true, wasGone: previous?.gone == true, now: now, policy: policy)
            if let memory {
                slots[Int(slot)].memory = memory
            } else {
                slots[Int(slot)] = Slot(key: "", memory: ActivityMemory())
                index[key] = nil
                freeSlots.append(slot)
                let bundleId = String(key.prefix { $0 != "/" })
                apps[bundleId, default: 1] -= 1
                if apps[bundleId] == 0 { apps[bundleId] = nil }
            }
        }

        /// Changes the memory of `key`, if remembered, in place, then as ``set(_:_:now:policy:restored:)``.
        mutating func update(_ key: String, now: Date, policy: FreshnessPolicy, _ change: (inout ActivityMemory) -> Void) {
            guard let slot = index[key] else { return }
            let (wasLive, wasGone) = (slots[Int(slot)].memory.isLive, slots[Int(slot)].memory.gone)
            change(&slots[Int(slot)].memory)
            unwritten(key, partition: slots[Int(slot)].memory.partition)
            changed(slot, slots[Int(slot)].memory, wasLive: wasLive, wasGone: wasGone, now: now, policy: policy)
        }

        private mutating func changed(_ slot: Int32, _ memory: ActivityMemory?, wasLive: Bool, wasGone: Bool, now: Date, policy: FreshnessPolicy) {
            liveCount += (memory?.isLive == true ? 1 : 0) - (wasLive ? 1 : 0)
            if memory?.gone == true { gone.insert(slot) } else if wasGone { gone.remove(slot) }
            look(at: slot, memory, now: now, policy: policy)
        }

        /// Brings the activity's freshness class up to date at `now`, and schedules it at its next deadline.
        mutating func look(at slot: Int32, _ memory: ActivityMemory?, now: Date, policy: FreshnessPolicy) {
            let class_ = memory?.freshness(now: now, policy: policy).flatMap { $0 == .fresh ? nil : $0 }
            let previous: Freshness?
            if let class_ { previous = notFresh.updateValue(class_, forKey: slot) } else { previous = notFresh.removeValue(forKey: slot) }
            if previous != class_ {
                if let previous { notFreshCounts[previous, default: 0] -= 1 }
                if let class_ { notFreshCounts[class_, default: 0] += 1 }
            }
            if let due = memory?.nextDeadline(now: now, policy: policy) { deadlines.schedule(slot, at: due, now: now) } else { deadlines.cancel(slot) }
        }

        /// Looks at the activities due at `now` (their class may have changed by time) without
        /// acting: those with something to do stay due for the monitor.
        mutating func catchUp(now: Date, policy: FreshnessPolicy) {
            for slot in deadlines.popDue(now: now) where !slots[Int(slot)].key.isEmpty {
                look(at: slot, slots[Int(slot)].memory, now: now, policy: policy)
            }
        }
    }
    private let state: Mutex<State>
    /// What the engine takes for now (timestamps, stale dates, the freshness monitor).
    let clock: any WallClock

    public init(
        assembler: PayloadAssembler, tokens: PartitionTokens, freshness: FreshnessPolicy = FreshnessPolicy(),
        clock: any WallClock = SystemWallClock()
    ) {
        self.assembler = assembler
        self.tokens = tokens
        self.state = Mutex(State(heldKey: { [tokens] in tokens.heldKey($0) }))
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
        var ignored: String?
        // An end whose alerting update was written and the end not (its writer stopped between
        // the two, or Kafka refused the end while the partition moved): the event is read again
        // by the next owner, whose memory has its sequence from the update (and its content, also
        // when the freshness monitor sent it again since). The end is still owed.
        let writtenInPart: String? = {
            guard event.kind == .end, !memory.ended, memory.lastSequence == event.sequence else { return nil }
            let alert = RequestIds.alertBeforeEnd(bundleId: String(activityKey.prefix { $0 != "/" }), activityId: event.activityId, eventId: event.eventId)
            return memory.contentRequestId == alert ? alert : nil
        }()
        if writtenInPart == nil, let last = memory.lastSequence, event.sequence <= last {
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

    // MARK: The changelog

    /// An activity's memory to write to the changelog (`nil`: forgotten, a tombstone).
    public struct Unwritten: Sendable {
        public var partition: Int32
        public var activityKey: String
        public var memory: ActivityMemory?
    }

    /// Takes the memories of `partitions` that changed since they were last taken: write them to
    /// the changelog, or hand them back (``unwrittenAgain(_:)``) when that fails.
    public func takeUnwritten(partitions: Set<Int32>) -> [Unwritten] {
        state.withLock { state in
            var taken: [Unwritten] = []
            for (partition, keys) in state.unwritten.take(partitions: partitions) {
                for key in keys { taken.append(Unwritten(partition: partition, activityKey: key, memory: state.memory(key))) }
            }
            return taken
        }
    }

    /// The partitions whose changes are tracked for the changelog are now `partitions` (this
    /// instance's assignment; called on each assignment, not on revocations, so that a partition
    /// revoked and assigned back is not written again in full). Until the first call every
    /// partition's changes are tracked (a start's memory, rebuilt, may be ahead of the changelog);
    /// then the others are dropped. A partition gained from another instance has every memory
    /// marked: what this instance knows of it while another owned it was not tracked here, and
    /// its last owner may have stopped before writing it.
    /// These partitions went to another instance: the floors of their timestamps are forgotten (a
    /// partition that comes back gets a new one, past what its owner meanwhile can have stamped).
    public func releaseTimestampFloors(_ partitions: some Sequence<Int32>) {
        state.withLock { state in for partition in partitions { state.timestampFloors[partition] = nil } }
    }

    public func trackChanges(of partitions: Set<Int32>) {
        let floor = ContentTimestamps.floor(assignedAt: clock.date)
        state.withLock { state in
            // Partitions gained: their next timestamps start past the previous owner's.
            for partition in partitions where state.timestampFloors[partition] == nil { state.timestampFloors[partition] = floor }
            for partition in state.timestampFloors.keys where !partitions.contains(partition) { state.timestampFloors[partition] = nil }
            let gained = state.unwritten.track(only: partitions)
            if !gained.isEmpty {
                for (key, _, memory) in state.all {
                    if let partition = memory.partition, gained.contains(partition) { state.unwritten.note(key, partition: partition) }
                }
            }
        }
    }

    /// Memories taken by ``takeUnwritten(partitions:)`` that did not reach the changelog.
    public func unwrittenAgain(_ items: [Unwritten]) {
        state.withLock { state in
            for item in items { state.unwritten.note(item.activityKey, partition: item.partition) }
        }
    }

    /// Activities whose memory changed since it was last written to the changelog, in these partitions.
    public func unwrittenCount(partitions: Set<Int32>) -> Int {
        state.withLock { $0.unwritten.count(partitions: partitions) }
    }

    /// An activity's memory read from the changelog (`nil`: a tombstone, the activity forgotten).
    /// Read before the requests and outcomes after the checkpoint, which then move it on.
    public func restore(_ activityKey: String, _ memory: ActivityMemory?) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            state.set(activityKey, memory, now: now, policy: policy, restored: true)
            if let key = memory?.latestPushToStartKey { state.startOwners[key] = activityKey }
        }
    }

    /// Forgets the memories of `partitions` (revoked, and not assigned back: another instance
    /// owns them now and its changelog has them), without writing anything to the changelog.
    /// - Returns: how many memories were forgotten.
    @discardableResult
    public func forget(partitions: Set<Int32>) -> Int {
        guard !partitions.isEmpty else { return 0 }
        let (now, policy) = (clock.date, freshness)
        return state.withLock { state in
            let keys = state.all.compactMap { item in item.memory.partition.map(partitions.contains) == true ? item.key : nil }
            for key in keys { state.set(key, nil, now: now, policy: policy, restored: true) }
            state.unwritten.drop(partitions: partitions)
            state.startOwners = state.startOwners.filter { state.index[$0.value] != nil }
            state.startOwnersPruned = state.startOwners.count
            return keys.count
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

    /// The freshness monitor's pass: for each live activity, what to send by itself — its latest
    /// content again when stale (at most ``FreshnessPolicy/maximumResends`` times, spaced), its
    /// end when severely stale or at the end of its lifetime. Forgets activities not heard of
    /// within the retention. Send the results, then ``commit(_:)`` each.
    ///
    /// Looks only at the activities due (their deadline passed) and at those whose token is dead
    /// (whether the app registered one again), never at every activity.
    /// - Parameter owned: the partitions this instance owns (`nil`: all); other instances look
    ///   after the rest. An activity of another partition stays scheduled at its own deadline, so
    ///   that it is looked at once its partition is owned (until then its owner's requests, read
    ///   back, move it on).
    public func sweep(owned: Set<Int32>? = nil) -> [Prepared] {
        let now = clock.date
        let policy = freshness
        let tokens = self.tokens
        return state.withLock { state -> [Prepared] in
            func isOwned(_ memory: ActivityMemory) -> Bool { owned.map { owned in memory.partition.map(owned.contains) ?? false } ?? true }
            // The app registered a token after APNs's verdict (a new one, or the same again): the
            // activity is watched again (and, stale, refreshed in this pass: it is due at once).
            var revived: [(String, ActivityMemory)] = []
            for slot in state.gone {
                let (activityKey, memory) = (state.slots[Int(slot)].key, state.slots[Int(slot)].memory)
                guard memory.latest != nil, isOwned(memory),
                    Self.registeredAgain(memory, token: tokens.token(forKey: activityKey))
                else { continue }
                var alive = memory
                alive.gone = false
                revived.append((activityKey, alive))
            }
            for (activityKey, memory) in revived { state.set(activityKey, memory, now: now, policy: policy) }

            // Partitions newly owned: their live activities are looked at now (the others had
            // put them off a minute at a time).
            if state.swept, let last = state.lastOwned, owned.map({ !$0.isSubset(of: last) }) ?? true {
                var newlyOwned: [Int32] = []
                for (_, slot, memory) in state.all where memory.isLive {
                    let ownedNow = owned.map { owned in memory.partition.map(owned.contains) ?? false } ?? true
                    if ownedNow, !(memory.partition.map(last.contains) ?? false) { newlyOwned.append(slot) }
                }
                for slot in newlyOwned { state.deadlines.schedule(slot, at: now, now: now) }
            }
            state.lastOwned = owned
            state.swept = true
            let due = state.deadlines.popDue(now: now)
            state.examinedInLastSweep = due.count
            state.payloadsToRead = []
            var prepared: [Prepared] = []
            for slot in due {
                let (activityKey, memory) = (state.slots[Int(slot)].key, state.slots[Int(slot)].memory)
                guard !activityKey.isEmpty, let latest = memory.latest else { continue }
                // Forgotten whoever owns it: the retention is about memory, not about sending.
                if !memory.isLive, now.timeIntervalSince(latest.createdAt) > policy.retention / .seconds(1) {
                    state.set(activityKey, nil, now: now, policy: policy)
                    continue
                }
                // Scheduled again as it is: at once when there is something to do. If the request
                // made now is persisted, ``commit(_:)`` schedules the activity's next deadline;
                // if not, the next pass decides again.
                state.look(at: slot, memory, now: now, policy: policy)
                // Another instance's, or nothing the monitor can do (its payload lost): looked at
                // again in a minute, not on every pass.
                if memory.isLive, !isOwned(memory) || memory.payloadLost {
                    // (Earlier when its freshness class changes by then: the counts stay exact.)
                    var later = now.addingTimeInterval(60)
                    if let since = memory.staleSince(now: now) {
                        let severe = since.addingTimeInterval(policy.severeAfter / .seconds(1))
                        if severe > now { later = min(later, severe) }
                    }
                    state.deadlines.schedule(slot, at: later, now: now)
                    continue
                }
                guard memory.isLive, let item = followUp(
                        activityKey, memory, latest: latest, now: now, policy: policy, timestampFloor: memory.partition.flatMap { state.timestampFloors[$0] }) else {
                    continue
                }
                if item.requests.isEmpty, let position = memory.payloadToRead {
                    state.payloadsToRead.append(PayloadToRead(activityKey: activityKey, position: position, requestId: latest.requestId))
                    continue
                }
                prepared.append(item)
            }
            if state.startOwners.count > max(state.index.count, 2 * state.startOwnersPruned) {
                state.startOwners = state.startOwners.filter { state.index[$0.value] != nil }
                state.startOwnersPruned = state.startOwners.count
            }
            return prepared
        }
    }

    /// What the monitor sends by itself for a live activity at `now`, if anything: its latest content
    /// again (stale, re-sends left, spaced), or its end (severely stale, or its lifetime over).
    private func followUp(
        _ activityKey: String, _ memory: ActivityMemory, latest: LatestRequest, now: Date, policy: FreshnessPolicy, timestampFloor: Int64?
    ) -> Prepared? {
        let followUp: FollowUp
        if let started = memory.startedAt, now.timeIntervalSince(started) >= policy.lifetime / .seconds(1) {
            followUp = .end(.lifetimeExceeded)
        } else {
            switch memory.freshness(now: now, policy: policy) {
            case .severelyStale?:
                followUp = .end(.severelyStale)
            case .staleRecoverable?:
                guard memory.resends < policy.maximumResends else { return nil }
                if let last = memory.lastResendAt, now.timeIntervalSince(last) < policy.resendSpacing / .seconds(1) { return nil }
                followUp = .resend
            case .fresh?, nil:
                return nil
            }
        }
        let requestId = followUp == .resend
            ? RequestIds.resend(of: memory.contentRequestId ?? latest.requestId, number: memory.resends + 1)
            : RequestIds.end(after: latest.requestId)
        // The request is to be read again first: nothing to send yet (the caller notes it).
        if memory.payloadToRead != nil { return Prepared(requests: [], shrinks: [], activityKey: activityKey, memory: memory) }
        guard let full = memory.latestRequest else { return nil }
        let timestamp = ContentTimestamps.next(wanted: ContentTimestamps.seconds(now), now: now, last: memory.lastTimestamp, floor: timestampFloor)
        // The registration it goes to, when the table has one (a broadcast goes to none).
        let registeredAt = full.isBroadcast ? nil : tokens.token(forKey: activityKey).map(\.registeredAt)
        guard
            let request = assembler.followUp(
                followUp, of: full, requestId: requestId, timestamp: timestamp, now: now, tokenRegisteredAt: registeredAt)
        else { return nil }
        var next = memory
        next.replay(request)
        var item = Prepared(requests: [request], shrinks: [], activityKey: activityKey, memory: next)
        if case .end(let reason) = followUp { item.invalidation = reason }
        return item
    }

    /// Whether the activity's token, declared dead, was registered since: an active record the
    /// verdict does not kill (``TokenVerdict``, the rule token-registry and apns-dispatcher apply:
    /// another token, or the same registered after APNs's verdict); without a verdict (the
    /// dispatcher found the token invalidated), any active record.
    static func registeredAgain(_ memory: ActivityMemory, token record: DeliveryToken?) -> Bool {
        guard let record, record.state == .active else { return false }
        guard let since = memory.goneAt else { return true }
        let verdict = TokenVerdict(reason: .apnsUnregistered, fingerprint: memory.goneToken, since: since)
        return !verdict.kills(fingerprint: record.fingerprint, registeredAt: record.registeredAt)
    }

    /// The live activities that are not fresh, most stale first.
    public func staleActivities(limit: Int = 1_000) -> [StaleActivity] {
        let now = clock.date
        let policy = freshness
        let stale = state.withLock { state in
            state.catchUp(now: now, policy: policy)
            return state.notFresh.keys.compactMap { slot -> StaleActivity? in
                let (activityKey, memory) = (state.slots[Int(slot)].key, state.slots[Int(slot)].memory)
                guard !activityKey.isEmpty, let freshness = memory.freshness(now: now, policy: policy), freshness != .fresh,
                    let since = memory.staleSince(now: now), let latest = memory.latest
                else { return nil }
                return StaleActivity(
                    activityId: String(activityKey.drop { $0 != "/" }.dropFirst()),
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
            state.catchUp(now: now, policy: policy)
            var counts = Dictionary(uniqueKeysWithValues: Freshness.allCases.map { ($0, state.notFreshCounts[$0] ?? 0) })
            counts[.fresh] = state.liveCount - state.notFresh.count
            return counts
        }
    }

    /// Activities the last ``sweep(owned:)`` found due and looked at: tests check that a pass is
    /// proportional to what is due.
    var examinedInLastSweep: Int { state.withLock { $0.examinedInLastSweep } }

    /// The dispatcher's final outcome of one of the activity's recent requests, if it came.
    public func outcome(of requestId: String, activityKey: String) -> PushResult? {
        state.withLock { $0.memory(activityKey)?.outcome(of: requestId) }
    }

    /// What a backend may ask about an activity (`GET /v1/activities/{activityId}`).
    public struct ActivityView: Sendable {
        /// What this instance remembers of it (`nil`: no event of it handled, or forgotten after the retention).
        public var memory: ActivityMemory?
        /// Its update token in the token table (`nil`: none registered).
        public var token: DeliveryToken?
        /// Its freshness now; `nil` when it is not live (not started, ended, its token dead).
        public var freshness: Freshness?
        /// Since when what the phone shows is out of date.
        public var staleSince: Date?
    }

    /// What is known of an activity (`<bundleId>/<activityId>`): `nil` when neither an event nor a token of it is.
    public func view(of activityKey: String) -> ActivityView? {
        let (now, policy) = (clock.date, freshness)
        let memory = state.withLock { $0.memory(activityKey) }
        let token = tokens.token(forKey: activityKey)
        guard memory != nil || token != nil else { return nil }
        return ActivityView(memory: memory, token: token, freshness: memory?.freshness(now: now, policy: policy), staleSince: memory?.staleSince(now: now))
    }

    /// What is remembered of an activity, by its key (`<bundleId>/<activityId>`; tests, diagnostics).
    public func memory(of activityKey: String) -> ActivityMemory? { state.withLock { $0.memory(activityKey) } }

    /// Activities remembered.
    public var activityCount: Int { state.withLock { $0.index.count } }
}

/// Activities (by their slot in the engine's memory) by their next deadline: a min-heap of (due,
/// slot), and each slot's current deadline. An entry counts when its due is the slot's current
/// one; the others (superseded, or of a forgotten activity) are dropped when they come out. An
/// activity whose deadline moves later keeps its earlier entry (no push on every event or outcome:
/// the heap stays about as large as the activities remembered): it comes out early, is looked at,
/// and is scheduled again. 16 bytes an entry and 8 a slot.
struct DeadlineQueue: Sendable {
    private struct Entry: Comparable, Sendable {
        var due: Double
        var slot: Int32
        static func < (a: Entry, b: Entry) -> Bool { (a.due, a.slot) < (b.due, b.slot) }
    }
    private var heap = Heap<Entry>()
    /// By slot: its current deadline (seconds since the reference date), or infinity for none.
    private var scheduled: [Double] = []
    private var scheduledCount = 0

    /// Makes sure `slot` comes out no later than `due`: its current entry is kept when it is earlier
    /// and not already due (a due one would be looked at again for nothing).
    mutating func schedule(_ slot: Int32, at date: Date, now: Date) {
        let (index, due, now) = (Int(slot), date.timeIntervalSinceReferenceDate, now.timeIntervalSinceReferenceDate)
        if index >= scheduled.count { scheduled.append(contentsOf: repeatElement(.infinity, count: index + 1 - scheduled.count)) }
        let current = scheduled[index]
        if current != .infinity, current <= due, current > now || due <= now { return }
        if current == .infinity { scheduledCount += 1 }
        scheduled[index] = due
        heap.insert(Entry(due: due, slot: slot))
        // Superseded entries wait for their time to be dropped. Should they come to outnumber the
        // current ones (deadlines moved earlier again and again), the heap is rebuilt: memory
        // stays bounded, and the rebuild costs no more than the insertions that made it necessary.
        if heap.count > 2 * scheduledCount + 1_024 {
            heap = Heap(scheduled.enumerated().compactMap { $0.element == .infinity ? nil : Entry(due: $0.element, slot: Int32($0.offset)) })
        }
    }

    /// `slot` has no deadline any more.
    mutating func cancel(_ slot: Int32) {
        let index = Int(slot)
        guard index < scheduled.count, scheduled[index] != .infinity else { return }
        scheduled[index] = .infinity
        scheduledCount -= 1
    }

    /// Removes the activities due at `now` (each once), earliest first. Schedule them again after
    /// this returns: one scheduled at or before `now` comes out of the next call.
    mutating func popDue(now date: Date) -> [Int32] {
        let now = date.timeIntervalSinceReferenceDate
        var slots: [Int32] = []
        while let first = heap.min, first.due <= now {
            let entry = heap.removeMin()
            guard scheduled[Int(entry.slot)] == entry.due else { continue }
            cancel(entry.slot)
            slots.append(entry.slot)
        }
        return slots
    }

    /// Entries held (current and superseded).
    var count: Int { heap.count }
}
