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

    /// One send of a request: what goes to APNs, and what its answer is handled with.
    struct Attempt: Sendable {
        var entry: QueuedRequest
        var key: String
        var team: String
        var push: APNsPush
        var environment: APNsEnvironment
        /// The token's fingerprint (`nil` for a broadcast).
        var fingerprint: String?
        /// The registration time of the token record it was sent with (`nil` for a broadcast).
        var registeredAt: Date?
        /// The channel of a broadcast.
        var channelId: String?
        var priority: Int
        var downgraded: Bool
        /// The `sending` record of a push-to-start (each attempt) or of a push with an alert (its
        /// first), persisted before the send: after a crash, the next owner knows it may have been
        /// delivered. Its ``PushOutcome/announcementId`` is the one a `retrying` takes back.
        var announcement: PushOutcome?
    }

    struct Slot {
        var queue = ActivityQueue()
        var inFlight: QueuedRequest?
        /// Nothing is sent before this (a retry's backoff, or 429 TooManyRequests for the token).
        var notBefore: Date?
        /// A wake-up is scheduled for then.
        var wakeAt: Date?
        /// An `end` was delivered: later updates are pointless.
        var ended = false
        var endedAt: Date?
        /// Failed tries to make the activity's broadcast channel, in a row.
        var channelAttempts: Int?

        /// The request to look at next: the first waiting, when none is in flight.
        var next: QueuedRequest? { inFlight == nil ? queue.first : nil }

        /// Whether the request is in flight or waiting here.
        func holds(_ requestId: String) -> Bool {
            inFlight?.request.requestId == requestId || queue.pending.contains { $0.request.requestId == requestId }
        }
    }

    /// A team whose credentials APNs refused (a 403 other than ExpiredProviderToken). Its pushes
    /// are held in their queues, not sent and not given up, until `until`; then one request probes
    /// the lane while the others wait for its answer. An answer that shows the credentials were
    /// accepted reopens the lane; another refusal starts the cooldown again; an answer that says
    /// nothing about them (5xx, a provider-token problem, no answer) lets another request probe.
    /// A held request keeps its bounds: its `expiration`, and the retry policy's deadline.
    struct StoppedLane {
        var until: Date
        /// APNs's reason for the last refusal.
        var reason: String
        /// The request id of the probe in flight.
        var probe: String?
        /// The activities whose next request is held: pumped again when the probe is answered.
        var held: Set<String> = []
    }

    /// A token APNs declared dead (``TokenVerdict``, the rule token-registry and content-service
    /// apply too): a record of it registered at or before APNs's verdict is not used; one
    /// registered after it (the app registered the token again) is alive.
    struct DeadToken {
        var verdict: TokenVerdict
        var at: Date

        func kills(_ record: DeliveryToken) -> Bool {
            verdict.kills(fingerprint: record.fingerprint, registeredAt: record.registeredAt)
        }
    }

    /// The newest content of an activity handed to APNs (sent, perhaps delivered): an update with
    /// older content is not sent after it (it could reach the phone after the newer one).
    struct Floor {
        var sequence: Int64
        var requestId: String
        var at: Date
    }

    /// A request whose retry waits for its note (``Action/note(_:)``) to be persisted.
    struct Parked {
        var key: String
        var at: Date
    }

    /// A copy of a request read while the request was held here, and the assignment of its
    /// partition it was read under.
    struct Copy {
        var ticket: UInt64
        var assignment: UInt64?
    }

    /// An activity to look at again at a time.
    struct Wakeup: Comparable {
        var at: Date
        var key: String
        static func < (lhs: Wakeup, rhs: Wakeup) -> Bool { lhs.at < rhs.at }
    }

    let tokens: PartitionTokens
    let policy: DispatcherPolicy
    let teams: [String: String]
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
    private(set) var inFlight = 0
    /// How many may be in flight (at most ``DispatcherPolicy/maximumInFlight``).
    var window: SendWindow
    var queued = 0
    /// Outcomes handed out with ``Action/publish(_:ticket:)`` and not yet persisted.
    private(set) var publishing = 0
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
        if finishedByPartition[partition]?.contains(request.requestId) == true || ownFinished.contains(request.requestId)
            || announcedFinished[request.requestId] != nil
        {
            // Sent before a restart: its outcome is on the topic already.
            metrics.duplicate()
            maybeDelivered[partition]?[request.requestId] = nil
            return [.release(ticket: ticket)]
        }
        guard let key = request.key else {
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
    mutating func admit(_ entry: QueuedRequest, key: String, atFront: Bool = false) {
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
        if slots[key]?.ended == true && request.event != .start {
            finish(entry, .expired, detail: "the activity has ended: nothing is sent after its end")
            return
        }
        if let floor = olderThanSent(request, key: key) {
            finish(entry, .coalesced, supersededBy: floor.requestId, detail: "older than content already sent (#\(floor.sequence))")
            return
        }
        if atFront {
            putBack(entry, key: key, at: now)
            pump(key)
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
        guard request.event == .update, let floor = floors[key], request.contentSequence < floor.sequence,
            now.timeIntervalSince(floor.at) < DispatchMachine.floorLifetime
        else { return nil }
        return floor
    }

    /// How long a copy of a request may come after it (``RecentOutcomes/clockMargin``): finished
    /// push-to-starts and pushes with an alert are remembered that long.
    static let finishedHorizon = RecentOutcomes.clockMargin

    /// How long the newest content sent to an activity holds older content back.
    static let floorLifetime: TimeInterval = 3_600

    /// Notes `sequence` as the newest content of `key` handed to APNs (unless newer was).
    mutating func raiseFloor(_ key: String, sequence: Int64, requestId: String) {
        if let floor = floors[key], floor.sequence >= sequence, now.timeIntervalSince(floor.at) < Self.floorLifetime { return }
        floors[key] = Floor(sequence: sequence, requestId: requestId, at: now)
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
        _ requestIds: some Sequence<String>, maybeDelivered: [String: Set<String>], floors: [String: (sequence: Int64, requestId: String)] = [:],
        partition: Int32? = nil
    ) {
        // Read for a partition given up meanwhile: its next owner reads them.
        guard owns(partition) else { return }
        finishedByPartition[partition, default: []].formUnion(requestIds)
        for (requestId, announcements) in maybeDelivered where !(finishedByPartition[partition]?.contains(requestId) ?? false) {
            self.maybeDelivered[partition, default: [:]][requestId, default: []].formUnion(announcements)
        }
        for (key, floor) in floors { raiseFloor(key, sequence: floor.sequence, requestId: floor.requestId) }
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

    // MARK: Sending

    /// Sends the activity's first waiting request if nothing stops it; otherwise schedules a look
    /// at it for when something may have changed. Nothing new is sent once a drain began.
    mutating func pump(_ key: String) {
        guard isAccepting else { return }
        while true {
            // No copy of the slot is kept: the queue changes below (see `submit`).
            guard let head = slots[key]?.next else {
                setAwaiting(key, until: nil)
                return
            }
            if let notBefore = slots[key]?.notBefore {
                if notBefore > now { return wake(key, at: notBefore) }
                slots[key]?.notBefore = nil
            }
            switch check(head, key: key, queued: slots[key]?.queue.pending.count ?? 0) {
            case .finished:
                continue
            case .held:
                return
            case .ready(let recipient, let team):
                // A send slot, then the priority the budget allows.
                guard inFlight < window.limit else {
                    if readySet.insert(key).inserted { ready.append(key) }
                    return
                }
                let decision =
                    switch recipient {
                    case .token(let record):
                        budgets.decide(head.request, key: key, record: record, partition: head.partition, now: now, policy: policy.budgets)
                    case .channel(let channel):
                        budgets.decideBroadcast(
                            head.request, key: key, storagePolicy: channel.storagePolicy, partition: head.partition, now: now, policy: policy.budgets)
                    }
                switch decision {
                case .wait(let until):
                    wake(key, at: until)
                case .send(let priority, let downgraded):
                    if head.request.priority == 10, let remaining = budgets.remaining(for: key, now: now) { metrics.budgetRemaining(remaining) }
                    startSending(key, recipient: recipient, team: team, priority: priority, downgraded: downgraded)
                }
                return
            }
        }
    }

    /// What becomes of an activity's first waiting request, before a send slot and the budget.
    enum Check {
        /// It has its outcome (or was a copy of a finished one): look at the next.
        case finished
        /// It waits (for its token, for a stopped lane); it is looked at again when that may change.
        case held
        /// Its token (or channel) is usable and its team known.
        case ready(Recipient, team: String)
    }

    /// Whom a request goes to.
    enum Recipient {
        /// The activity's (or a push-to-start) token.
        case token(DeliveryToken)
        /// The activity's broadcast channel.
        case channel(BroadcastChannelRecord)
    }

    /// The request's token (present, active, not refused by APNs), its bounds (lifetime,
    /// expiration), its team's key and lane.
    mutating func check(_ head: QueuedRequest, key: String, queued: Int) -> Check {
        let request = head.request
        guard owns(head) else {
            // Its partition is no longer this machine's: the next owner does it.
            dropHead(key)
            actions.append(.abandon([head.ticket] + (copies.isEmpty ? [] : (copies.removeValue(forKey: request.requestId) ?? []).map(\.ticket))))
            return .finished
        }
        if let floor = olderThanSent(request, key: key) {
            return drop(head, key: key, .coalesced, "older than content already sent (#\(floor.sequence))", supersededBy: floor.requestId)
        }
        if request.isBroadcast { return checkBroadcast(head, key: key) }
        // Without a usable token the request waits for a record (``tokenArrived(_:now:)`` wakes
        // it): a missing one for the token wait; an invalidated or refused one briefly, since the
        // app may have registered it again (reinstalled) just before this content was made and the
        // table not have read it yet.
        guard let record = tokens.token(forKey: key) else {
            return waitForToken(head, key: key, queued: queued, wait: policy.tokenWait, .awaitingToken,
                "no token was registered for the activity while the content was current")
        }
        if let wanted = request.tokenRegisteredAt, Self.milliseconds(record.registeredAt) < Self.milliseconds(wanted) {
            // The content was made for a registration this instance's table has not read yet (it
            // lags the topic): it waits for that record (``tokenArrived(_:now:)`` wakes it), not for
            // a guess of how long the table may lag; past the token wait, the record the table
            // holds decides (below).
            let waitEnd = min(head.enqueuedAt.addingTimeInterval(policy.tokenWait / .seconds(1)), request.expiration ?? .distantFuture)
            if now < waitEnd {
                setAwaiting(key, until: waitEnd, requests: queued)
                return .held
            }
        }
        guard record.state == .active, !(deadTokens[key]?.kills(record) ?? false) else {
            return waitForToken(head, key: key, queued: queued, wait: policy.tokenRecheck, .tokenInvalid,
                "the token is \(record.state == .active ? "refused by APNs" : record.state.rawValue)")
        }
        setAwaiting(key, until: nil)
        let startedAt = record.activityStartedAt ?? record.registeredAt
        if request.event == .update, now.timeIntervalSince(startedAt) > policy.activityLifetime / .seconds(1) {
            return drop(head, key: key, .expired, "the activity is older than 8 hours: iOS no longer shows updates")
        }
        if let expiration = request.expiration, expiration < now {
            return drop(head, key: key, .expired, "apns-expiration passed before it could be sent")
        }
        guard let team = teams[record.app.bundleId] else {
            return drop(head, key: key, .rejected, "no APNs signing key is configured for \(record.app.bundleId)")
        }
        return holdForLane(head, key: key, team: team) ?? .ready(.token(record), team: team)
    }

    /// A date to the millisecond, as records carry it (the token table keeps milliseconds).
    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000).rounded(.down)) }

    /// Holds `head` until `wait` after it was queued (never past its expiration), then ends it as `result`.
    mutating func waitForToken(_ head: QueuedRequest, key: String, queued: Int, wait: Duration, _ result: PushResult, _ detail: @autoclosure () -> String) -> Check {
        let waitEnd = min(head.enqueuedAt.addingTimeInterval(wait / .seconds(1)), head.request.expiration ?? .distantFuture)
        if now < waitEnd {
            setAwaiting(key, until: waitEnd, requests: queued)
            return .held
        }
        setAwaiting(key, until: nil)
        return drop(head, key: key, result, detail())
    }

    mutating func drop(_ head: QueuedRequest, key: String, _ result: PushResult, _ detail: String, supersededBy: String? = nil) -> Check {
        dropHead(key)
        finish(head, result, supersededBy: supersededBy, detail: detail)
        return .finished
    }

    /// A stopped lane holds its team's requests during the cooldown and while its probe is in
    /// flight, within each request's bounds; `nil` when the team's lane is open.
    mutating func holdForLane(_ head: QueuedRequest, key: String, team: String) -> Check? {
        guard let lane = stoppedLanes[team], lane.probe != nil || lane.until > now else { return nil }
        let request = head.request
        let deadline = policy.retry.deadline(expiration: request.expiration, firstAttempt: head.firstAttemptAt ?? head.enqueuedAt)
        if deadline <= now {
            let refused = "APNs refused team \(team)'s credentials (\(lane.reason))"
            return request.expiration != nil
                ? drop(head, key: key, .expired, "apns-expiration passed while \(refused)")
                : drop(head, key: key, .failed, "\(refused) and did not accept them again before the request's deadline")
        }
        stoppedLanes[team]?.held.insert(key)
        wake(key, at: lane.probe == nil ? min(lane.until, deadline) : deadline)
        return .held
    }

    /// Takes the activity's first request out of its queue and hands it out to be sent.
    mutating func startSending(_ key: String, recipient: Recipient, team: String, priority: Int, downgraded: Bool) {
        guard var sending = slots[key]?.queue.removeFirst() else { return }
        if stoppedLanes[team] != nil {
            // The cooldown is over: this request probes the lane; the team's others wait for its answer.
            stoppedLanes[team]?.probe = sending.request.requestId
        }
        queued -= 1
        sending.attempts += 1
        sending.firstAttemptAt = sending.firstAttemptAt ?? now
        // Announced (`sending`, persisted before it goes): a push-to-start, every attempt; a push
        // with an alert, its first (and the first after APNs certainly did not take one). The next
        // owner does not start a second activity, and does not alert twice.
        let announces = DispatchEngine.isPushToStart(sending.request) || (sending.request.alerting && !sending.handedOff && !sending.ambiguous)
        if announces {
            sending.handedOff = true
            sending.announcementId = newAnnouncementId()
        }
        slots[key]?.inFlight = sending
        inFlight += 1
        metrics.inFlight(inFlight)
        if sending.request.event != .start { raiseFloor(key, sequence: sending.request.contentSequence, requestId: sending.request.requestId) }
        let attempt =
            switch recipient {
            case .token(let record):
                attempt(sending, key: key, record: record, team: team, priority: priority, downgraded: downgraded, announces: announces)
            case .channel(let channel):
                broadcast(sending, key: key, channel: channel, team: team, priority: priority, downgraded: downgraded, announces: announces)
            }
        actions.append(.send(attempt))
    }

    func attempt(
        _ entry: QueuedRequest, key: String, record: DeliveryToken, team: String, priority: Int, downgraded: Bool, announces: Bool = false
    ) -> Attempt {
        let request = entry.request
        let payload = entry.ambiguous && request.alerting ? DispatchEngine.withoutAlert(request.payload) : request.payload
        let push = APNsPush(
            deviceToken: record.token, topic: "\(record.app.bundleId).push-type.liveactivity", priority: priority, apnsID: request.requestId,
            expiration: request.expiration.map { Int64($0.timeIntervalSince1970) } ?? 0, payload: ByteBuffer(string: payload))
        let fingerprint = TokenFingerprint.of(token: record.token)
        let announcement: PushOutcome? =
            announces
            ? PushOutcome(
                requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: .sending,
                attempts: entry.attempts, tokenFingerprint: fingerprint,
                detail: DispatchEngine.isPushToStart(request) ? "push-to-start about to be sent" : "a push with an alert about to be sent",
                completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType, contentSequence: request.contentSequence,
                announcementId: entry.announcementId)
            : nil
        return Attempt(
            entry: entry, key: key, team: team, push: push, environment: record.app.environment, fingerprint: fingerprint,
            registeredAt: record.registeredAt, priority: priority, downgraded: downgraded, announcement: announcement)
    }

    /// Notes that `key`'s first request waits for a token until `until` (`nil`: it does not wait),
    /// holding `requests` of the queued requests; it is looked at again then.
    mutating func setAwaiting(_ key: String, until: Date?, requests: Int = 0) {
        let previous = awaiting[key]
        awaitingRequests -= previous?.requests ?? 0
        guard let until, requests > 0 else {
            if previous != nil { awaiting[key] = nil }
            return
        }
        if previous == nil, awaiting.count >= policy.maximumAwaitingToken, let oldest = awaiting.min(by: { $0.value.until < $1.value.until })?.key {
            giveUpWaiting(oldest, detail: "more than \(policy.maximumAwaitingToken) activities wait for their token")
        }
        awaiting[key] = (until, requests)
        awaitingRequests += requests
        wake(key, at: until)
        // They do not count against the queue limit, but against this one.
        while awaitingRequests > policy.maximumAwaitingRequests, let first = awaiting.min(by: { $0.value.until < $1.value.until })?.key {
            giveUpWaiting(first, detail: "more than \(policy.maximumAwaitingRequests) requests wait for their token")
        }
    }

    /// Ends every request of `key` that waits for a token (or for a newer one than the invalid
    /// token it has), now.
    mutating func giveUpWaiting(_ key: String, detail: String) {
        setAwaiting(key, until: nil)
        guard slots[key] != nil else { return }
        let result: PushResult = tokens.token(forKey: key) == nil ? .awaitingToken : .tokenInvalid
        let waiting = slots[key]!.queue.removeAll { _ in true }
        queued -= waiting.count
        for entry in waiting { finish(entry, result, detail: detail) }
    }

    mutating func dropHead(_ key: String) {
        guard slots[key] != nil else { return }
        _ = slots[key]!.queue.removeFirst()
        queued -= 1
    }

    /// Looks at `key` again at `date` (unless that is already planned for earlier), and never
    /// at the instant being handled: a budget whose next send is a rounding error away would
    /// otherwise be woken again and again at the same `now`.
    mutating func wake(_ key: String, at requested: Date) {
        let date = max(requested, now.addingTimeInterval(0.001))
        if let scheduled = slots[key]?.wakeAt, scheduled <= date { return }
        slots[key]?.wakeAt = date
        wakeups.insert(Wakeup(at: date, key: key))
    }

    /// A send slot came free: the activities waiting for one go, in the order they became ready.
    mutating func pumpReady() {
        while isAccepting, inFlight < window.limit, let key = ready.popFirst() {
            readySet.remove(key)
            pump(key)
        }
    }

    /// An attempt is over (answered or not): its send slot is free.
    mutating func attemptEnded(_ key: String) {
        inFlight -= 1
        metrics.inFlight(inFlight)
        slots[key]?.inFlight = nil
    }

    /// Hands out the request's one final outcome, to be persisted before its ticket is done.
    mutating func finish(
        _ entry: QueuedRequest, _ result: PushResult, apns: PushOutcome.APNsResponse? = nil, priority: Int? = nil, fingerprint: String? = nil,
        supersededBy: String? = nil, detail: String? = nil
    ) {
        let request = entry.request
        let outcome = PushOutcome(
            requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: result, apns: apns,
            priorityUsed: apns == nil ? nil : priority, attempts: entry.attempts,
            latencyMilliseconds: apns == nil ? nil : max(0, now.timeIntervalSince(request.createdAt) * 1_000), tokenFingerprint: fingerprint,
            supersededBy: supersededBy, detail: detail, completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType,
            channelId: request.isBroadcast ? request.key.flatMap { channels[$0]?.channelId } : nil, contentSequence: request.contentSequence)
        metrics.outcome(result)
        ownFinished.insert(request.requestId)
        if DispatchEngine.isPushToStart(request) || request.alerting {
            announcedFinished[request.requestId] = now
            announcedFinishedOrder.append((request.requestId, now))
            while let oldest = announcedFinishedOrder.first, now.timeIntervalSince(oldest.at) > Self.finishedHorizon {
                announcedFinishedOrder.removeFirst()
                if announcedFinished[oldest.id] == oldest.at { announcedFinished[oldest.id] = nil }
            }
        }
        persisting[request.requestId] = []
        if let key = request.key { forgetIfIdle(key) }
        publishing += 1
        let copies = copies.isEmpty ? [] : (copies.removeValue(forKey: request.requestId) ?? []).map(\.ticket)
        maybeDelivered[entry.partition]?[request.requestId] = nil
        actions.append(.publish(outcome, ticket: entry.ticket, copies: copies))
    }
}
