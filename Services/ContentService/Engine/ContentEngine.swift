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
    /// Events assembled when a backend handed them here, until they are read back.
    let assembledAhead = AssembledAhead()
    /// Whether each use of a kept assembly is checked by assembling again (the simulator's runs).
    let checksAssembledAhead: Bool
    let assembledAheadMismatches = Atomic<Int>(0)
    /// Records of activities' other devices this instance's table read, and when: their latest
    /// content may have been made without them (``catchUpDevices(in:owned:now:prepared:)``).
    let lateDevices = LateDevices()

    public init(
        assembler: PayloadAssembler, tokens: PartitionTokens, freshness: FreshnessPolicy = FreshnessPolicy(),
        clock: any WallClock = SystemWallClock(), checksAssembledAhead: Bool = false
    ) {
        self.checksAssembledAhead = checksAssembledAhead
        self.assembler = assembler
        self.tokens = tokens
        self.state = Mutex(ActivityMemories(heldKey: { [tokens] in tokens.heldKey($0) }))
        self.freshness = freshness
        self.clock = clock
        tokens.onApply { [lateDevices, tokens] key in
            guard MessageKey.splitDevice(key) != nil else { return }
            lateDevices.applied(key, token: tokens.token(forKey: key), at: clock.date)
        }
    }

    public enum Decision: Sendable {
        /// Send these, then ``commit(_:)`` the prepared memory.
        case send(Prepared)
        /// Nothing to send, and why (counted, and the event marked processed).
        case ignore(String)
        /// An event for later (``ActivityEvent/at``): write the activity's steps to the changelog,
        /// then ``commit(_:)-(Scheduled)`` them; the event is then processed.
        case schedule(Scheduled)
    }

    /// Requests ready to be sent, and the activity's memory once they are.
    public struct Prepared: Sendable {
        public var requests: [PushRequest]
        public var shrinks: [String]
        /// The activity, of its app (`<bundleId>/<activityId>`).
        public let activityKey: String
        /// The activity's memory once they are persisted; `nil`: they change nothing of it (copies
        /// to a device registered late).
        let memory: ActivityMemory?
        /// The freshness monitor ended the activity by itself, for this reason: its token is to be
        /// invalidated in token-registry once the end is persisted.
        public var invalidation: InvalidationReason? = nil
    }

    /// The prepared requests are persisted: the activity's memory moves on.
    public func commit(_ prepared: Prepared) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            let wasEnded = state.memory(prepared.activityKey)?.ended ?? false
            if let memory = prepared.memory { state.set(prepared.activityKey, memory, now: now, policy: policy) }
            for request in prepared.requests { state.noteStart(request, of: prepared.activityKey) }
            if !wasEnded { oweRecentChannelStarts(prepared.activityKey, in: &state, now: now) }
        }
    }

    /// An activity sent by broadcast that just ended (its memory says so now, and did not before):
    /// phones whose start on its channel APNs accepted within ``channelEndMargin`` before its end
    /// was made are owed the end again.
    func oweRecentChannelStarts(_ activityKey: String, in state: inout ActivityMemories, now: Date) {
        guard let memory = state.memory(activityKey), memory.ended, let end = memory.latest,
            let starts = state.recentChannelStarts.removeValue(forKey: activityKey)
        else { return }
        for (deviceId, at) in starts where at > end.createdAt.addingTimeInterval(-Self.channelEndMargin) {
            lateDevices.owe(activityKey, deviceId: deviceId, at: now)
        }
    }

    /// A request read back from `islet.push-requests.v1`: the memory of its activity catches up
    /// (after a restart, or when another instance handled the activity before).
    /// - Parameter partition: the partition of the activity's records (for a request to a running
    ///   activity, the one it was read from; a push-to-start request's is its activity id's).
    /// - Parameter storedAt: where it was read (its payload is then not kept: read there again when needed).
    public func replay(_ request: PushRequest, partition: Int32? = nil, storedAt: KafkaPosition? = nil) {
        // A copy for one more device follows its activity's request: the memory is the request's.
        // So does a widget push: it concerns the user's widgets, not the activity's content; and a
        // start on the activity's broadcast channel for one more phone: the channel's content is
        // the activity's (its outcome finds the activity by its channel).
        guard !request.isDeviceCopy, !request.isWidget, !request.joinsChannel, let activityKey = request.activityKey else { return }
        // So does the start for one more device of a user; its outcome still finds the activity.
        if request.isStartCopy {
            state.withLock { $0.noteStart(request, of: activityKey) }
            return
        }
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            var memory = state.memory(activityKey) ?? ActivityMemory()
            let wasEnded = memory.ended
            memory.replay(request)
            if let storedAt { memory.stored(request.requestId, at: storedAt) }
            if let partition { memory.partition = partition }
            state.set(activityKey, memory, now: now, policy: policy)
            state.noteStart(request, of: activityKey)
            // (An end another writer made, read back.)
            if !wasEnded { oweRecentChannelStarts(activityKey, in: &state, now: now) }
        }
    }

    /// A request this service sent is on `islet.push-requests.v1` at `position` (Kafka acknowledged
    /// it): when it is still its activity's latest, its payload is not kept any more.
    public func stored(_ request: PushRequest, at position: KafkaPosition) {
        guard !request.isDeviceCopy, !request.isStartCopy, !request.isWidget, !request.joinsChannel, let activityKey = request.activityKey else { return }
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
        // (Except content-service's own later verdict on a start: the lookup shows it.)
        guard outcome.result.isFinal || outcome.result == .startUnconfirmed else { return }
        // A copy's for one more device: the activity's freshness follows its own request's outcomes.
        guard outcome.deviceId == nil else { return }
        // A widget push's: about the user's widgets, not the activity.
        guard outcome.widgetKey == nil else { return }
        let (now, policy) = (clock.date, freshness)
        // A start on the activity's broadcast channel's: about one more phone, not the activity's
        // content. One that may have reached its phone after the activity's end was made (or
        // just before: ``channelEndMargin``): that phone's activity joined the channel after its
        // end went, and is owed the end again. The activity is found by its channel.
        if let key = outcome.pushToStartKey, let channel = outcome.channelId {
            guard Self.mayHaveStarted(outcome), let deviceId = PartitionTokens.deviceId(ofPushToStartKey: key) else { return }
            state.withLock { state in
                guard let bundleId = outcome.bundleId, let activityKey = state.channelOwners[ActivityMemories.channelKey(bundleId: bundleId, channelId: channel)],
                    let memory = state.memory(activityKey), let end = memory.latest
                else { return }
                guard memory.ended else {
                    // Live: kept a while, in case the end is made within the margin.
                    if now.timeIntervalSince(outcome.completedAt) <= 2 * Self.channelEndMargin {
                        state.noteRecentChannelStart(activityKey, deviceId: deviceId, at: outcome.completedAt, limit: Self.maximumLateDevices)
                    }
                    return
                }
                guard outcome.completedAt > end.createdAt.addingTimeInterval(-Self.channelEndMargin) else { return }
                lateDevices.owe(activityKey, deviceId: deviceId, at: now)
            }
            return
        }
        state.withLock { state in
            let activityKey: String?
            if let activityId = outcome.activityId, outcome.bundleId == nil {
                // Written before outcomes named their app: the only app remembered with the id.
                let keys = state.keys(ofActivity: activityId)
                activityKey = keys.count == 1 ? keys.first : nil
            } else if outcome.activityId == nil {
                activityKey = state.startRequests[outcome.requestId]?.activityKey ?? outcome.pushToStartKey.flatMap { state.startOwners[$0] }
            } else {
                activityKey = outcome.key
            }
            // A failed or expired delivery makes the content stale at once; a delivered one may
            // revive an activity whose token was declared dead: scheduled again either way.
            guard let activityKey else { return }
            // Read before (a restart reads the outcomes since the changelog's checkpoint again).
            let readBefore = position.map { state.memory(activityKey)?.outcomePositions.contains($0) == true } ?? false
            // The start for one more device of a user: its outcome is not the activity's.
            if state.startRequests[outcome.requestId]?.copy != true {
                state.update(activityKey, now: now, policy: policy) { $0.record(outcome, at: position) }
            }
            // A start that reached a device after the activity's end was made: that end is owed
            // to it (``endsOwed(in:owned:now:prepared:)``).
            if !readBefore, let key = outcome.pushToStartKey, Self.mayHaveStarted(outcome), let memory = state.memory(activityKey), memory.ended,
                let end = memory.latest, outcome.completedAt > end.createdAt, let deviceId = PartitionTokens.deviceId(ofPushToStartKey: key)
            {
                lateDevices.owe(activityKey, deviceId: deviceId, at: now)
            }
        }
    }

    /// How long before an activity's end was made a push-to-start on its channel accepted by APNs
    /// still owes the channel the end again: APNs may hand the start to the phone after the end's
    /// broadcast (a second end on the channel is harmless: an ended activity ignores it).
    static let channelEndMargin: TimeInterval = 60

    /// Whether a push-to-start's outcome says it may have started its activity on the phone
    /// (`failed`: its answer was unknown, also when a dispatcher that read it again after a
    /// restart finished it without an attempt of its own).
    static func mayHaveStarted(_ outcome: PushOutcome) -> Bool {
        outcome.result == .delivered || outcome.result == .deliveredDowngraded || outcome.result == .failed
    }

}
