import DequeModule
import Foundation
import HeapModule
import IsletMessages
import IsletTokens
import Logging
import NIOCore

/// The dispatcher's decisions, as a synchronous state machine: per-activity queues, budgets,
/// coalescing, guards, retries, stopped lanes and the one final outcome of every request.
///
/// It does nothing by itself. Each input — a request read, a token applied, an answer from APNs,
/// time passed, partitions revoked, a drain begun — changes its state and returns the actions that
/// follow: send this attempt, publish this outcome, release this ticket, renew a provider token,
/// reconnect. ``DispatchEngine`` feeds it inputs and carries out its actions; tests feed it
/// directly, with a manual clock's time. When it next wants to be woken is ``nextWakeup``.
struct DispatchMachine {
    enum Action: Sendable {
        /// Send this attempt to APNs (persisting its announcement first, if it has one), then give
        /// the answer to ``answered(_:_:seconds:now:)``.
        case send(Attempt)
        /// Persist this final outcome, then report its ticket done (and those of the copies of its
        /// request read while it was held) and call ``outcomePersisted(_:now:)``.
        case publish(PushOutcome, ticket: UInt64, copies: [UInt64])
        /// Nothing to publish (the request's outcome is on the topic already): report the ticket done.
        case release(ticket: UInt64)
        /// Persist this record that is not final — what the partition's next owner must know of a
        /// request that waits for its retry (``PushResult/retrying``: APNs did not take the
        /// announced attempt; ``PushResult/sending``: an alerting push whose attempt may have
        /// reached the phone) — then call ``notePersisted(_:now:)``. The request waits, held like a
        /// push in flight (a revocation waits for it), until then.
        case note(PushOutcome)
        /// These tickets' requests are left to their partition's next owner (the partition was
        /// given up while they were held): nothing is marked past them.
        case abandon([UInt64])
        /// APNs said the team's provider token expired: mint a new one.
        case renewProviderToken(team: String)
        /// APNs said the provider token changes too often: open new connections for the team.
        case reconnect(team: String)
        /// Have APNs make a broadcast channel, persist its record, then give it to
        /// ``channelCreated(_:now:)`` (or the failure to ``channelNotCreated(_:retryable:detail:now:)``).
        case createChannel(ChannelCreation)
        /// Persist this channel record (its end and deletion time): nothing waits for it.
        case recordChannel(BroadcastChannelRecord)
        /// Have APNs delete the channel, persist the record saying so, then give it to
        /// ``channelDeleted(_:now:)`` (or call ``channelNotDeleted(_:now:)``).
        case deleteChannel(BroadcastChannelRecord, team: String)
    }

    let tokens: PartitionTokens
    let policy: DispatcherPolicy
    let teams: [String: String]
    /// The apps no signing key covers in one of the environments (scoped keys): rejected there.
    var uncovered: Set<AppTarget> = []
    /// With scoped keys, the key id that signs for each app in each environment: the lane a push
    /// goes on (stopped, probed, renewed) is that key's, so one bad key stops only what it signs.
    /// Empty: the team's (one key per team).
    var signers: [AppTarget: String] = [:]

    /// A lane's credentials, as logs and outcomes name them.
    func credentials(of lane: String) -> String {
        signers.isEmpty ? "team \(lane)'s credentials" : "the credentials of key \(lane)"
    }

    /// The lane an app's pushes in its environment go on: the key that signs for it, or its team.
    func lane(for app: AppTarget) -> String? {
        signers.isEmpty ? teams[app.bundleId] : signers[app]
    }
    let random: @Sendable () -> Double
    let logger: Logger
    let metrics = DispatcherMetrics()

    /// The time of the input being handled.
    var now: Date
    /// What the input being handled asks for, in order.
    var actions: [Action] = []

    var slots: [String: Slot] = [:]
    var budgets: BudgetBook
    /// Tokens APNs declared dead, by key, until token-registry's invalidation reaches the table
    /// (or the app registers the token again: a later registration time revives it).
    var deadTokens: [String: DeadToken] = [:]
    var stoppedLanes: [String: StoppedLane] = [:]
    var wakeups = Heap<Wakeup>()
    var inFlight = 0
    /// How many may be in flight (at most ``DispatcherPolicy/maximumInFlight``).
    var window: SendWindow
    var queued = 0
    /// Outcomes handed out with ``Action/publish(_:ticket:)`` and not yet persisted.
    var publishing = 0
    /// Activities whose first request waits for a token: when that wait ends, and how many of the
    /// `queued` requests they hold (``awaitingRequests`` in all; not counted for backpressure).
    var awaiting: [String: (until: Date, requests: Int)] = [:]
    var awaitingRequests = 0
    /// Activities with a request ready to go, waiting for a send slot.
    var ready = Deque<String>()
    var readySet: Set<String> = []
    private(set) var isAccepting = true
    /// The request partitions this machine works for, once told (``own(_:)``; `nil`: every one),
    /// each with the assignment it is in: a request read under an earlier assignment of its
    /// partition (given up and assigned back meanwhile) is not this assignment's to send.
    private(set) var ownedPartitions: [Int32: UInt64]?
    private var lastAssignment: UInt64 = 0
    /// Request ids whose final outcome was on the topic when their partition was assigned, by
    /// partition (forgotten with the partition).
    var finishedByPartition: [Int32?: Set<String>] = [:]
    /// The request ids this engine gave a final outcome to, the most recent
    /// ``DispatcherPolicy/rememberedFinished``: a copy read again (its partition lost in a broker
    /// stall and assigned back before the outcome was on the topic for
    /// ``alreadyFinished(_:maybeDelivered:floors:partition:)`` to see) is not sent again.
    var ownFinished: RecentIDs
    /// The request ids this engine gave a final outcome to, by activity, for ``finishedHorizon``
    /// (``DispatcherPolicy/rememberedFinishedPerActivity`` of each, for
    /// ``DispatcherPolicy/rememberedFloors`` activities): a copy content-service wrote again after a
    /// lost acknowledgement, read once ``ownFinished`` has moved past its request (a busy instance
    /// finishes 100,000 requests in seconds), is released, not given a second outcome.
    var finishedByActivity: FinishedRequests
    /// The push-to-starts and pushes with an alert this engine gave a final outcome to, for
    /// ``finishedHorizon`` whatever their number: a copy of one content-service wrote again
    /// minutes later (a send it retried after a lost acknowledgement) must not start a second
    /// activity, or alert again, once the window of ``ownFinished`` has moved past it.
    var announcedFinished: [String: Date] = [:]
    var announcedFinishedOrder = Deque<(id: String, at: Date)>()
    /// Request ids with announcements on the topic (``PushResult/sending``, by announcement id)
    /// not taken back and without a final outcome: an attempt may have reached the phone. A
    /// push-to-start among them is not sent again; an update or end is sent again without its alert.
    /// By partition, forgotten with the partition.
    var maybeDelivered: [Int32?: [String: Set<String>]] = [:]
    /// Requests waiting for their note to be persisted, by request id.
    var parked: [String: Parked] = [:]
    var noting = 0
    /// The newest content handed to APNs, by activity (``DispatcherPolicy/rememberedFloors`` of
    /// them, for at most an hour each).
    var floors: [String: Floor] = [:]
    /// Names this machine in its announcement ids; announcements made so far.
    let machineId: String
    var announcements: UInt64 = 0
    var floorOrder = Deque<(key: String, at: Date)>()
    /// The copies of a request read again while the request itself was held here (waiting or in
    /// flight), by request id: done when its one outcome is persisted.
    var copies: [String: [Copy]] = [:]
    /// The requests whose outcome is handed out and not yet persisted, with the tickets of copies
    /// read meanwhile: done only once it is (done at once, a crash before the outcome is on the
    /// topic would leave the request with none, its offset committed).
    var persisting: [String: [UInt64]] = [:]
    /// The broadcast channels of the activities sent by broadcast, by key; those APNs is making;
    /// when those ended are due to be deleted, and those being deleted.
    var channels: [String: BroadcastChannelRecord] = [:]
    var creatingChannels: Set<String> = []
    var channelDeletions = Heap<Wakeup>()
    var deletingChannels: Set<String> = []
    var lastSweep = Date.distantPast

    init(tokens: PartitionTokens, policy: DispatcherPolicy, teams: [String: String], random: @escaping @Sendable () -> Double, logger: Logger, now: Date) {
        self.tokens = tokens
        self.budgets = BudgetBook { tokens.heldKey($0) }
        self.policy = policy
        self.teams = teams
        self.random = random
        self.logger = logger
        self.now = now
        window = SendWindow(policy: policy)
        ownFinished = RecentIDs(capacity: policy.rememberedFinished)
        finishedByActivity = FinishedRequests(
            perActivity: policy.rememberedFinishedPerActivity, maximumActivities: policy.rememberedFloors, horizon: Self.finishedHorizon)
        machineId = String(UInt64(random() * 9_007_199_254_740_992), radix: 36) + String(UInt64(random() * 9_007_199_254_740_992), radix: 36)
    }

    // MARK: What the driver asks

    /// Whether another request may be read: not too many wait in queues (those waiting for a token
    /// do not count) and not too many outcomes wait to be persisted.
    var hasRoom: Bool { queued - awaitingRequests < policy.maximumQueued && publishing < policy.maximumQueued }

    /// A drain began and nothing is in flight or waits to be persisted.
    var isDrained: Bool { !isAccepting && inFlight == 0 && publishing == 0 && noting == 0 }

    /// When the machine next wants ``timePassed(now:)``.
    var nextWakeup: Date? {
        switch (wakeups.min?.at, channelDeletions.min?.at) {
        case (let activity?, let channel?): min(activity, channel)
        case (let activity, let channel): activity ?? channel
        }
    }

    /// Every time it asked to be woken at, and not yet woken (unordered).
    var plannedWakeups: [Date] { wakeups.unordered.map(\.at) + channelDeletions.unordered.map(\.at) }

    /// How many activities and push-to-start devices it remembers (it must not grow with every
    /// activity ever seen).
    var remembered: (activities: Int, pushToStartDevices: Int) { (Set(slots.keys).union(budgets.activityKeys).count, budgets.deviceCount) }

    /// Whether requests read from `partition` are this machine's to work on.
    func owns(_ partition: Int32?) -> Bool {
        guard let partition, let ownedPartitions else { return true }
        return ownedPartitions[partition] != nil
    }

    /// Whether `entry` was read under its partition's current assignment.
    func owns(_ entry: QueuedRequest) -> Bool {
        guard let partition = entry.partition, let ownedPartitions else { return true }
        return ownedPartitions[partition] == entry.assignment
    }

    /// Finished request ids remembered from the topic (for tests: forgotten with their partition).
    var finishedCount: Int { finishedByPartition.values.reduce(0) { $0 + $1.count } }

    // MARK: Inputs

    /// A request was read. Call only while ``isAccepting``; the driver holds input back while
    /// ``hasRoom`` is false.
    mutating func submit(_ request: PushRequest, ticket: UInt64, partition: Int32? = nil, now: Date) -> [Action] {
        self.now = now
        guard isAccepting else { return [] }
        metrics.received(request)
        var entry = QueuedRequest(request: request, ticket: ticket, enqueuedAt: now, partition: partition)
        entry.assignment = partition.flatMap { ownedPartitions?[$0] }
        if persisting[request.requestId] != nil {
            // Its outcome is on its way to the topic: the copy is done with it (and what the
            // topic said of it before is moot).
            metrics.duplicate()
            persisting[request.requestId]!.append(ticket)
            maybeDelivered[partition]?[request.requestId] = nil
            return []
        }
        let key = request.key
        if finishedByPartition[partition]?.contains(request.requestId) == true || ownFinished.contains(request.requestId)
            || announcedFinished[request.requestId] != nil || key.map({ finishedByActivity.contains(request.requestId, key: $0, now: now) }) == true
        {
            // (The last: a copy content-service wrote again after a lost acknowledgement, read once
            // ``ownFinished`` moved past its request.)
            // Sent before a restart: its outcome is on the topic already.
            metrics.duplicate()
            maybeDelivered[partition]?[request.requestId] = nil
            return [.release(ticket: ticket)]
        }
        guard let key else {
            finish(entry, .rejected, detail: "no activity id or push-to-start key")
            return takeActions()
        }
        // The slot is read and changed where the dictionary keeps it: a copy of it held while its
        // queue changes would copy the whole queue (every request waiting) for each push.
        if slots[key]?.holds(request.requestId) == true {
            // Read again while it waits or is in flight here (its partition lost in a broker stall
            // and assigned back): the copy joins it, for one send and one outcome. Queued, it could
            // be coalesced by newer content while the first copy is delivered (two outcomes), or
            // coalesce the first copy itself (none sent). (Before the records of the topic are
            // looked at: they may be this very request's own, written while it is held here.)
            metrics.duplicate()
            copies[request.requestId, default: []].append(Copy(ticket: ticket, assignment: entry.assignment))
            return []
        }
        admit(entry, key: key)
        return takeActions()
    }

    /// What the topic and the activity say of a request about to be queued: sent before (an
    /// attempt may have reached the phone), after the activity's end, older than what was sent;
    /// then queued, coalescing as the queue does.
    mutating func admit(_ entry: QueuedRequest, key: String, atFront: Bool = false, pumping: Bool = true) {
        var entry = entry
        let request = entry.request
        if let announced = maybeDelivered[entry.partition]?.removeValue(forKey: request.requestId), !announced.isEmpty {
            if DispatchEngine.isPushToStart(request) {
                finish(entry, .failed, detail: DispatchEngine.unknownStartAnswer + " (sent before a restart)")
                return
            }
            // An attempt may have reached the phone: sent again, without its alert.
            entry.ambiguous = true
            entry.handedOff = true
        }
        // (Except a broadcast's end again: a phone started on the channel after the end went.)
        if slots[key]?.ended == true && request.event != .start && !(request.isBroadcast && request.event == .end) {
            finish(entry, .expired, detail: "the activity has ended: nothing is sent after its end")
            return
        }
        if let floor = olderThanSent(request, key: key) {
            finish(entry, .coalesced, supersededBy: floor.requestId, detail: "older than content already sent (#\(floor.sequence))")
            return
        }
        if atFront {
            putBack(entry, key: key, at: now)
            if pumping { pump(key) }
            return
        }
        queued += 1
        let replaced = slots[key, default: Slot()].queue.enqueue(entry)
        for replaced in replaced {
            queued -= 1
            finish(replaced.request, .coalesced, supersededBy: replaced.by, detail: "replaced by newer content")
        }
        pump(key)
    }

    /// The activity's newest content sent, when `request` is an update older than it.
    func olderThanSent(_ request: PushRequest, key: String) -> Floor? {
        // A widget push carries its activity's sequence; several activities share its key.
        guard request.event == .update, !request.isWidget, let floor = floors[key], request.contentSequence < floor.sequence,
            now.timeIntervalSince(floor.at) < DispatchMachine.floorLifetime
        else { return nil }
        return floor
    }

    /// The `aps.timestamp` `request` goes with when it is sent now: its own, unless it is newer
    /// content than the activity was sent (a later sequence, or the end of the sequence sent) stamped older
    /// than a timestamp already sent, which iOS would ignore. That happens when two content-service
    /// instances wrote the activity's requests within a rebalance: the one that gave the partition
    /// up had requests in flight, stamped before the next owner's, that Kafka stored after the next
    /// owner's first (the next owner writes them again, with the same ids, and those copies are not
    /// sent). Then the newest timestamp sent: an equal timestamp is not older (iOS shows it, as
    /// ``ContentTimestamps`` says).
    func timestamp(for request: PushRequest, key: String) -> Int64 {
        guard request.event != .start, let floor = floors[key], now.timeIntervalSince(floor.at) < DispatchMachine.floorLifetime,
            request.apnsTimestamp < floor.timestamp, request.contentSequence > floor.sequence || (request.event == .end && request.contentSequence == floor.sequence)
        else { return request.apnsTimestamp }
        return floor.timestamp
    }

    /// How long a copy of a request may come after it (``RecentOutcomes/clockMargin``): finished
    /// push-to-starts and pushes with an alert are remembered that long, and the last requests
    /// each activity finished.
    static let finishedHorizon = RecentOutcomes.clockMargin

    /// How long the newest content sent to an activity holds older content back.
    static let floorLifetime: TimeInterval = 3_600

    /// Notes `sequence` as the newest content of `key` handed to APNs (unless newer was), and
    /// `timestamp` as its newest `aps.timestamp` (unless a newer was).
    mutating func raiseFloor(_ key: String, sequence: Int64, requestId: String, timestamp: Int64?) {
        let current = floors[key].flatMap { now.timeIntervalSince($0.at) < Self.floorLifetime ? $0 : nil }
        let newest = max(timestamp ?? .min, current?.timestamp ?? .min)
        if let current, current.sequence >= sequence {
            floors[key]?.timestamp = newest
            return
        }
        floors[key] = Floor(sequence: sequence, requestId: requestId, at: now, timestamp: newest)
        floorOrder.append((key, now))
        // At most that many activities: a raised floor leaves its earlier note behind, skipped.
        while floors.count > policy.rememberedFloors { forgetOldestFloor() }
        if floorOrder.count > 2 * floors.count + 1_024 { floorOrder = Deque(floorOrder.filter { floors[$0.key]?.at == $0.at }) }
    }

    /// Forgets the floor noted first, unless it was raised since (then a later note stands for it).
    mutating func forgetOldestFloor() {
        guard let oldest = floorOrder.popFirst() else { return }
        if floors[oldest.key]?.at == oldest.at { floors[oldest.key] = nil }
    }

    /// A token record was applied to the table: if requests wait for it, they go now.
    mutating func tokenArrived(_ key: String, now: Date) -> [Action] {
        self.now = now
        if awaiting[key] != nil { pump(key) }
        return takeActions()
    }

    /// The clock reached ``nextWakeup`` (or passed it): the activities due are looked at again.
    mutating func timePassed(now: Date) -> [Action] {
        self.now = now
        // The wake-ups due now, taken first: one planned while they are handled is for later.
        var due: [Wakeup] = []
        while let next = wakeups.min, next.at <= now { due.append(wakeups.removeMin()) }
        for wakeup in due {
            if slots[wakeup.key]?.wakeAt == wakeup.at { slots[wakeup.key]?.wakeAt = nil }
            pump(wakeup.key)
        }
        deleteChannelsDue()
        return takeActions()
    }

    /// What the partition's recent outcomes say (read at its assignment): request ids with a final
    /// outcome (not sent again), those an attempt of which may have reached the phone (a
    /// push-to-start among them gets `failed` instead of a second send, which could start a second
    /// activity; an update or end goes again without its alert), and the newest content sent to
    /// each activity (older content is not sent after it).
    mutating func alreadyFinished(
        _ requestIds: some Sequence<String>, maybeDelivered: [String: Set<String>], floors: [String: RecentOutcomes.Floor] = [:],
        partition: Int32? = nil
    ) {
        // Read for a partition given up meanwhile: its next owner reads them.
        guard owns(partition) else { return }
        finishedByPartition[partition, default: []].formUnion(requestIds)
        for (requestId, announcements) in maybeDelivered where !(finishedByPartition[partition]?.contains(requestId) ?? false) {
            self.maybeDelivered[partition, default: [:]][requestId, default: []].formUnion(announcements)
        }
        for (key, floor) in floors { raiseFloor(key, sequence: floor.sequence, requestId: floor.requestId, timestamp: floor.timestamp) }
    }

    /// Requests of these partitions are this machine's to work on (from now: until ``disown(_:)``).
    mutating func own(_ partitions: some Sequence<Int32>) {
        var owned = ownedPartitions ?? [:]
        for partition in partitions where owned[partition] == nil {
            lastAssignment += 1
            owned[partition] = lastAssignment
        }
        ownedPartitions = owned
    }

    /// These partitions went to another instance (or were lost): what is read from them is not
    /// taken, what of theirs comes back for a retry is dropped (the next owner does it), and what
    /// was remembered of their outcomes is forgotten.
    mutating func disown(_ partitions: some Sequence<Int32>) {
        var owned = ownedPartitions ?? [:]
        for partition in partitions { owned[partition] = nil }
        ownedPartitions = owned
        for partition in partitions {
            finishedByPartition[partition] = nil
            maybeDelivered[partition] = nil
        }
        // Their requests waiting here are left to the next owner now.
        var abandoned: [UInt64] = []
        let assignments = ownedPartitions ?? [:]
        let isOwned = { (entry: QueuedRequest) -> Bool in entry.partition.map { assignments[$0] == entry.assignment } ?? true }
        for key in Array(slots.keys) where !creatingChannels.contains(key) {
            let removed = slots[key]!.queue.removeAll { !isOwned($0) }
            guard !removed.isEmpty else { continue }
            queued -= removed.count
            if let waiting = awaiting[key] { setAwaiting(key, until: waiting.until, requests: slots[key]!.queue.pending.count) }
            for entry in removed {
                abandoned.append(entry.ticket)
                if !copies.isEmpty { abandoned += (copies.removeValue(forKey: entry.request.requestId) ?? []).map(\.ticket) }
            }
            if slots[key]!.queue.isEmpty && slots[key]!.inFlight == nil && !slots[key]!.ended { slots[key] = nil }
        }
        if !abandoned.isEmpty { actions.append(.abandon(abandoned)) }
    }

    /// An id for an announcement: the machine's own (drawn once from its randomness: a simulation
    /// replays it) and a count.
    mutating func newAnnouncementId() -> String {
        announcements += 1
        return machineId + "-" + String(announcements, radix: 16)
    }

    /// Drops the waiting requests whose tickets match (their partitions were revoked: the next
    /// owner reads them again). Returns their tickets. Those of an activity whose broadcast channel
    /// APNs is making stay, like a push in flight: the revocation waits for the channel and its
    /// first broadcast (the next owner would make a second channel before this one's record is
    /// on the topic), and drops the rest on its next look.
    mutating func dropWaiting(where matches: (UInt64) -> Bool) -> [UInt64] {
        var dropped: [UInt64] = []
        for key in Array(slots.keys) where !creatingChannels.contains(key) {
            let removed = slots[key]!.queue.removeAll { matches($0.ticket) }
            queued -= removed.count
            if let waiting = awaiting[key] { setAwaiting(key, until: waiting.until, requests: slots[key]!.queue.pending.count) }
            for entry in removed {
                dropped.append(entry.ticket)
                if !copies.isEmpty { dropped += (copies.removeValue(forKey: entry.request.requestId) ?? []).map(\.ticket) }
            }
            if slots[key]!.queue.isEmpty && slots[key]!.inFlight == nil && !slots[key]!.ended { slots[key] = nil }
        }
        return dropped
    }

    /// A graceful stop: nothing new is taken or sent. A send started now could be cut off by the
    /// shutdown after it reached APNs, without an outcome, and be sent again by the next owner.
    /// Requests still waiting in queues get no outcome: their input is not marked processed, so
    /// they are read again after the restart.
    mutating func beginDrain() { isAccepting = false }

    /// An outcome handed out with ``Action/publish(_:ticket:copies:)`` is persisted: the copies of
    /// its request read since it was handed out are done too.
    mutating func outcomePersisted(_ requestId: String, now: Date) -> [Action] {
        self.now = now
        publishing -= 1
        return (persisting.removeValue(forKey: requestId) ?? []).map { .release(ticket: $0) }
    }

    mutating func takeActions() -> [Action] {
        defer { actions.removeAll(keepingCapacity: true) }
        return actions
    }
}
