import Foundation
import IsletMessages
import IsletTokens
import Logging
import Synchronization

/// The heart of apns-dispatcher: carries out what ``DispatchMachine`` decides.
///
/// Inputs go into the machine under one lock, without a hop to another task: a request read
/// (``submit(_:ticket:)``, which waits while the queues are full), a token applied to the table,
/// an answer from APNs, the time it asked to be woken at, partitions revoked, a drain. Its actions
/// are carried out by a fixed set of tasks started by ``run()``: `maximumInFlight` senders, one
/// outcome publisher (which hands each outcome to Kafka without awaiting it: its acknowledgement
/// completes the request), one for the outcomes to hand over again, and one timer. No task is
/// started per push.
public final class DispatchEngine: Sendable {
    private struct State {
        var machine: DispatchMachine
        /// Submitters waiting for room in the queues.
        var submitters: [CheckedContinuation<Void, Never>] = []
        /// The time the timer sleeps until (`.distantFuture`: until it is rung; `.distantPast`: it is awake).
        var timerDeadline = Date.distantPast
        var stopped = false
    }

    private let state: Mutex<State>
    private let sender: any APNsSending
    private let outcomes: any OutcomeSink
    let clock: any WallClock
    /// The dispatcher's metrics: its machine's (one set for the service).
    let metrics: DispatcherMetrics
    private let logger: Logger
    private let onDone: @Sendable (UInt64) -> Void
    private let onAbandon: @Sendable ([UInt64]) -> Void
    private let workers: Int
    private let sends = WorkQueue<DispatchMachine.Attempt>()
    private let publishes = WorkQueue<(outcome: PushOutcome, ticket: UInt64, copies: [UInt64])>()
    /// Outcomes the sink did not persist, to hand over again at `at`.
    private let republishes = WorkQueue<Republish>()
    /// Channel management (rare: one channel per broadcast activity), done one at a time.
    private let channelJobs = WorkQueue<DispatchMachine.Action>()
    /// Notes for the partitions' next owners (rare: a push-to-start APNs did not take, an alerting
    /// push whose answer is unknown), persisted one at a time.
    private let notes = WorkQueue<PushOutcome>()
    /// Rung when the machine wants to be woken earlier than the timer sleeps until.
    private let alarm = Flag()
    private let drained = Flag()
    private let stopped = Flag()

    /// - Parameters:
    ///   - teams: the team id that signs for each bundle id.
    ///   - uncovered: the apps no signing key covers in one of the environments (scoped keys):
    ///     their requests there are rejected.
    ///   - signers: with scoped keys, the key id that signs for each app and environment (its
    ///     pushes go on that key's lane, and the sender is given the key id for the team id).
    ///   - onDone: called with a request's ticket once its outcome is persisted (or it needed none).
    ///   - onAbandon: called with the tickets of requests left to their partition's next owner.
    public init(
        sender: any APNsSending, tokens: PartitionTokens, outcomes: any OutcomeSink, policy: DispatcherPolicy, teams: [String: String],
        clock: any WallClock = SystemWallClock(), random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        logger: Logger, uncovered: Set<AppTarget> = [], signers: [AppTarget: String] = [:], onDone: @escaping @Sendable (UInt64) -> Void,
        onAbandon: @escaping @Sendable ([UInt64]) -> Void = { _ in }
    ) {
        self.sender = sender
        self.onAbandon = onAbandon
        self.outcomes = outcomes
        self.clock = clock
        self.logger = logger
        self.onDone = onDone
        workers = max(1, policy.maximumInFlight)
        var machine = DispatchMachine(tokens: tokens, policy: policy, teams: teams, random: random, logger: logger, now: clock.date)
        machine.uncovered = uncovered
        machine.signers = signers
        state = Mutex(State(machine: machine))
        metrics = state.withLock { $0.machine.metrics }
        // A token a request waits for arrives: that activity is looked at again (no polling).
        let engine = WeakEngine(self)
        tokens.onApply { key in engine.value?.step { $0.tokenArrived(key, now: $1) } }
    }

    /// Carries out the machine's actions until ``finish()`` (or until cancelled).
    public func run() async {
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                for _ in 0..<workers {
                    group.addTask { await self.sendLoop() }
                }
                group.addTask { await self.publishLoop() }
                group.addTask { await self.republishLoop() }
                group.addTask { await self.timerLoop() }
                group.addTask { await self.channelLoop() }
                group.addTask { await self.noteLoop() }
                await stopped.wait()
                // Finished: what is left are sends or publishes a drain timed out on.
                group.cancelAll()
            }
        } onCancel: {
            finish()
        }
    }

    /// Ends ``run()``; sends and publishes still under way are cancelled (an outcome not persisted
    /// leaves its ticket open: the request is read again after the restart).
    public func finish() {
        let submitters = state.withLock { state in
            state.stopped = true
            state.machine.beginDrain()
            defer { state.submitters.removeAll() }
            return state.submitters
        }
        for submitter in submitters { submitter.resume() }
        sends.finish()
        publishes.finish()
        republishes.finish()
        notes.finish()
        stopped.raise()
        alarm.raise()
    }

    /// Stops taking new requests and waits until no push is in flight and every outcome is
    /// persisted, at most `timeout`. Requests still waiting in queues get no outcome: their input
    /// is not marked processed, so they are read again after the restart.
    public func drain(timeout: Duration) async {
        let deadline = clock.date.addingTimeInterval(timeout / .seconds(1))
        step { machine, _ in
            machine.beginDrain()
            return []
        }
        let (clock, drained) = (self.clock, self.drained)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await drained.wait() }
            group.addTask { try? await clock.sleep(untilDate: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    /// What a partition's recent outcomes say, read at its assignment (``RecentOutcomes``): requests
    /// finished (not sent again), those that may have reached the phone (a push-to-start among them
    /// gets `failed`, an update goes again without its alert), the newest content sent per activity.
    public func alreadyFinished(_ ids: RecentOutcomes.Ids, partition: Int32? = nil) {
        state.withLock { $0.machine.alreadyFinished(ids.finished, maybeDelivered: ids.announcements, floors: ids.floors, partition: partition) }
    }

    /// Requests of these partitions are this engine's to work on (a partition assigned).
    public func own(_ partitions: [Int32]) {
        state.withLock { $0.machine.own(partitions) }
    }

    /// These partitions went to another instance, or were lost: what of theirs is read or comes
    /// back for a retry from now on is left to the next owner.
    public func disown(_ partitions: [Int32]) {
        step { machine, _ in
            machine.disown(partitions)
            return machine.takeActions()
        }
        // A submit waiting for room may be of one of them: it looks again (and is refused).
        let submitters = state.withLock { state in
            defer { state.submitters.removeAll() }
            return state.submitters
        }
        for submitter in submitters { submitter.resume() }
    }

    /// Takes a request. Returns at once unless too many requests are waiting (then it waits:
    /// backpressure on the input). Returns `false` when a drain began: the request was not taken
    /// (its ticket will never be done; the next owner reads it again).
    @discardableResult
    /// - Parameter partition: the partition it was read from (where the budget it spends is written).
    /// - Parameter stillAssigned: whether the record's partition is still this instance's (asked
    ///   when the request is taken: a submit that waited for room may outlive the partition).
    public func submit(_ request: PushRequest, ticket: UInt64, partition: Int32? = nil, stillAssigned: () -> Bool = { true }) async -> Bool {
        enum Admission {
            case taken
            case full
            case refused
        }
        while true {
            var admission = Admission.refused
            step { machine, now in
                guard machine.isAccepting, machine.owns(partition), stillAssigned() else { return [] }
                guard machine.hasRoom else {
                    admission = .full
                    return []
                }
                admission = .taken
                return machine.submit(request, ticket: ticket, partition: partition, now: now)
            }
            switch admission {
            case .taken: return true
            case .refused: return false
            case .full:
                await withCheckedContinuation { continuation in
                    let now = state.withLock { state in
                        // (A disown between the look above and this one resumed nobody: looked at here.)
                        guard state.machine.isAccepting, !state.machine.hasRoom, state.machine.owns(partition), stillAssigned() else { return true }
                        state.submitters.append(continuation)
                        return false
                    }
                    if now { continuation.resume() }
                }
            }
        }
    }

    /// Drops the waiting requests whose tickets match (their partitions were revoked: the next
    /// owner reads them again). Returns their tickets.
    public func dropWaiting(where matches: (UInt64) -> Bool) -> [UInt64] {
        var dropped: [UInt64] = []
        step { machine, _ in
            dropped = machine.dropWaiting(where: matches)
            return []
        }
        return dropped
    }

    // MARK: The budgets' changelog

    /// Takes the budgets of `partitions` that changed since last taken, to write to
    /// `islet.dispatch-budgets.v1` (``BudgetChangelog``); hand back those not written
    /// (``budgetChangesAgain(_:)``).
    func takeBudgetChanges(partitions: Set<Int32>) -> [BudgetBook.Change] {
        state.withLock { $0.machine.budgets.takeChanges(partitions: partitions) }
    }

    func budgetChangesAgain(_ changes: [BudgetBook.Change]) {
        state.withLock { $0.machine.budgets.changedAgain(changes) }
    }

    /// Budgets changed and not written yet, in `partitions`.
    func budgetChangeCount(partitions: Set<Int32>) -> Int {
        state.withLock { $0.machine.budgets.changeCount(partitions: partitions) }
    }

    /// Only `partitions` are this instance's now: changes of the others are not written by it.
    func trackBudgetChanges(of partitions: Set<Int32>) {
        state.withLock { $0.machine.budgets.trackChanges(of: partitions) }
    }

    /// A budget read from `islet.dispatch-budgets.v1` (a partition assigned, or followed while held).
    public func restoreBudget(_ record: DispatchBudgetRecord) {
        let now = clock.date
        state.withLock { $0.machine.budgets.restore(record, now: now) }
    }

    /// Submitters waiting for room in the queues (for tests).
    var waitingSubmitters: Int { state.withLock { $0.submitters.count } }

    /// How many activities and push-to-start devices the engine remembers (for tests: it must not
    /// grow with every activity ever seen).
    var remembered: (activities: Int, pushToStartDevices: Int) { state.withLock { $0.machine.remembered } }

    // MARK: Driving the machine

    /// Gives the machine one input and carries out what it asks; then lets the input go on if
    /// there is room, rings the timer if it must wake earlier, and tells a drain when it is over.
    private func step(_ input: (inout DispatchMachine, Date) -> [DispatchMachine.Action]) {
        let (actions, submitters) = state.withLock { state -> ([DispatchMachine.Action], [CheckedContinuation<Void, Never>]) in
            // Read under the lock: the machine's inputs never go back in time.
            let actions = input(&state.machine, clock.date)
            // A new provider token and fresh connections first, still under the lock: a retry
            // decided with them must not reach a worker, and an old connection, before them (that
            // connection is closed under it: the push lost, sent a third time).
            for action in actions {
                switch action {
                case .renewProviderToken(let team): sender.renewProviderToken(teamID: team)
                case .reconnect(let team): sender.reconnect(teamID: team)
                case .send, .publish, .release, .note, .abandon, .createChannel, .recordChannel, .deleteChannel: break
                }
            }
            // Handed out under the lock: sends and outcomes leave in the order they were decided.
            for action in actions {
                switch action {
                case .send(let attempt): sends.push(attempt)
                case .publish(let outcome, let ticket, let copies): publishes.push((outcome, ticket, copies))
                case .createChannel, .recordChannel, .deleteChannel: channelJobs.push(action)
                case .note(let note): notes.push(note)
                case .release, .abandon, .renewProviderToken, .reconnect: break
                }
            }
            if let next = state.machine.nextWakeup, next < state.timerDeadline { alarm.raise() }
            if state.machine.isDrained { drained.raise() }
            guard !state.machine.isAccepting || state.machine.hasRoom else { return (actions, []) }
            defer { state.submitters.removeAll() }
            return (actions, state.submitters)
        }
        for submitter in submitters { submitter.resume() }
        for action in actions {
            switch action {
            case .release(let ticket): onDone(ticket)
            case .abandon(let tickets): onAbandon(tickets)
            default: break
            }
        }
    }

    private func sendLoop() async {
        while let attempt = await sends.next() {
            // Its partition was given up (or lost) while the send waited for a sender, or for its
            // announcement: not sent (its announcement, if persisted, taken back); the partition's
            // next owner reads the request again.
            guard owns(attempt) else {
                step { $0.withdrawn(attempt, announced: false, now: $1) }
                continue
            }
            if let announcement = attempt.announcement {
                guard await persist(announcement) else { return }
                guard owns(attempt) else {
                    step { $0.withdrawn(attempt, announced: true, now: $1) }
                    continue
                }
            }
            let started = ContinuousClock.now
            let result: Result<APNsAnswer, any Error>
            do {
                result = .success(try await sender.send(attempt.push, teamID: attempt.team, environment: attempt.environment))
            } catch {
                result = .failure(error)
            }
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            step { $0.answered(attempt, result, seconds: seconds, now: $1) }
        }
    }

    private func owns(_ attempt: DispatchMachine.Attempt) -> Bool {
        state.withLock { $0.machine.owns(attempt.entry) }
    }

    private func publishLoop() async {
        while let (outcome, ticket, copies) = await publishes.next() {
            await publish(Republish(outcome: outcome, ticket: ticket, copies: copies))
        }
    }

    /// An outcome to persist, and how long to wait before handing it over again if it is not.
    private struct Republish: Sendable {
        var outcome: PushOutcome
        var ticket: UInt64
        var copies: [UInt64]
        var at = Date.distantPast
        var delay = Duration.milliseconds(100)
    }

    /// Hands an outcome to the sink without waiting: once it is persisted its request's tickets are
    /// done; if not, it is handed over again after a delay (100 ms, doubling up to 5 s). Never
    /// persisted (the engine stopped first): the tickets stay open, the request is read again.
    private func publish(_ item: Republish) async {
        await outcomes.submit(item.outcome) { [self] error in
            if let error {
                logger.warning("outcome not persisted; retrying", metadata: ["outcome.requestId": "\(item.outcome.requestId)", "error": "\(error)"])
                var again = item
                again.at = clock.date.addingTimeInterval(item.delay / .seconds(1))
                again.delay = min(item.delay * 2, .seconds(5))
                republishes.push(again)
                return
            }
            onDone(item.ticket)
            for copy in item.copies { onDone(copy) }
            step { $0.outcomePersisted(item.outcome.requestId, now: $1) }
        }
    }

    private func republishLoop() async {
        while let item = await republishes.next() {
            do { try await clock.sleep(untilDate: item.at) } catch { return }
            await publish(item)
        }
    }

    /// Wakes the machine at the time it asks for.
    private func timerLoop() async {
        let (clock, alarm) = (self.clock, self.alarm)
        while true {
            alarm.lower()
            let (next, stopped) = state.withLock { state -> (Date?, Bool) in
                let next = state.machine.nextWakeup
                state.timerDeadline = next ?? .distantFuture
                return (next, state.stopped)
            }
            if stopped || Task.isCancelled { return }
            await withTaskGroup(of: Void.self) { group in
                if let next { group.addTask { try? await clock.sleep(untilDate: next) } }
                group.addTask { await alarm.wait() }
                await group.next()
                group.cancelAll()
            }
            state.withLock { $0.timerDeadline = .distantPast }
            step { $0.timePassed(now: $1) }
        }
    }

    /// Makes, records and deletes broadcast channels, one at a time, and tells the machine.
    private func channelLoop() async {
        while let job = await channelJobs.next() {
            switch job {
            case .createChannel(let creation):
                let made: Result<String, any Error>
                do {
                    made = .success(
                        try await sender.createChannel(
                            bundleID: creation.app.bundleId, storagePolicy: APNsStoragePolicy(rawValue: creation.storagePolicy) ?? .noMessageStored,
                            teamID: creation.team, environment: creation.app.environment))
                } catch {
                    made = .failure(error)
                }
                switch made {
                case .success(let channelID):
                    let now = clock.date
                    let record = BroadcastChannelRecord(
                        app: creation.app, activityId: creation.activityId, channelId: channelID, storagePolicy: creation.storagePolicy, createdAt: now,
                        deleteAt: creation.deleteAt, writtenAt: now)
                    // Recorded before anything is sent on it: a restart finds it instead of making another.
                    guard await persist(record) else { return }
                    step { $0.channelCreated(record, now: $1) }
                case .failure(let error):
                    // No answer, 429 and 5xx may pass; a refusal (no capability, the 10,000 channels) does not.
                    let retryable = (error as? APNsChannelError).map { $0.status == 429 || $0.status >= 500 } ?? true
                    step { $0.channelNotCreated(creation.key, retryable: retryable, detail: "\(error)", now: $1) }
                }
            case .recordChannel(let record):
                guard await persist(record) else { return }
            case .deleteChannel(let channel, let team):
                do {
                    try await sender.deleteChannel(channel.channelId, bundleID: channel.app.bundleId, teamID: team, environment: channel.app.environment)
                } catch let refusal as APNsChannelError where refusal.channelIsGone {
                    // Gone already: what deleting it would have done.
                } catch {
                    logger.warning("broadcast channel not deleted; tried again later", metadata: ["apns.channel": "\(channel.channelId)", "error": "\(error)"])
                    step { $0.channelNotDeleted(channel.key ?? "", now: $1) }
                    continue
                }
                var deleted = channel
                deleted.deletedAt = clock.date
                deleted.writtenAt = clock.date
                guard await persist(deleted) else { return }
                step { $0.channelDeleted(deleted, now: $1) }
            case .send, .publish, .release, .note, .abandon, .renewProviderToken, .reconnect:
                break
            }
        }
    }

    /// Persists notes for the partitions' next owners, each before its request's retry, at once
    /// (a note held up by one partition's leader does not hold up the others').
    private func noteLoop() async {
        await withDiscardingTaskGroup { group in
            while let note = await notes.next() {
                group.addTask {
                    guard await self.persist(note) else { return }
                    self.step { $0.notePersisted(note, now: $1) }
                }
            }
        }
    }

    /// A channel record read from `islet.broadcast-channels.v1` when its partition was assigned.
    public func channelRecorded(_ record: BroadcastChannelRecord) {
        step { $0.channelRecorded(record, now: $1) }
    }

    /// Publishes an outcome record, retrying with backoff until Kafka acknowledges it; `false` if
    /// cancelled first.
    private func persist(_ outcome: PushOutcome) async -> Bool {
        await persist("outcome", metadata: ["outcome.requestId": "\(outcome.requestId)"]) { try await outcomes.publish(outcome) }
    }

    /// Publishes a channel record the same way.
    private func persist(_ channel: BroadcastChannelRecord) async -> Bool {
        await persist("broadcast channel record", metadata: ["apns.channel": "\(channel.channelId)"]) { try await outcomes.record(channel) }
    }

    private func persist(_ what: String, metadata: Logger.Metadata, _ write: () async throws -> Void) async -> Bool {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await write()
                return true
            } catch {
                logger.warning("\(what) not persisted; retrying", metadata: metadata.merging(["error": "\(error)"]) { $1 })
                do { try await clock.sleep(untilDate: clock.date.addingTimeInterval(delay / .seconds(1))) } catch { return false }
                delay = min(delay * 2, .seconds(5))
            }
        }
        return false
    }

    static func isPushToStart(_ request: PushRequest) -> Bool { request.pushToStartKey != nil && request.event == .start }

    static let unknownStartAnswer = "a push-to-start whose answer is unknown is not sent again, so that it can never start two activities"

    /// The payload without `aps.alert` and `aps.sound`, for a resend that may reach the phone twice:
    /// written as content-service writes payloads (``JSONValue/jsonBytes``: nothing escaped that
    /// needs no escape), so it is never longer than the payload it comes from.
    static func withoutAlert(_ payload: String) -> String {
        editingAPS(payload) { aps in
            aps["alert"] = nil
            aps["sound"] = nil
        } ?? payload
    }

    /// The payload with its `aps` object changed by `edit`, written as content-service writes
    /// payloads; `nil` when it has no `aps` object (content-service never writes one without).
    static func editingAPS(_ payload: String, _ edit: (inout [String: JSONValue]) -> Void) -> String? {
        guard case .object(var root)? = JSONReader.value(of: Array(payload.utf8)), case .object(var aps)? = root["aps"] else { return nil }
        edit(&aps)
        root["aps"] = .object(aps)
        return String(decoding: JSONValue.object(root).jsonBytes, as: UTF8.self)
    }
}

extension DispatchEngine {
    /// The payload with `aps.timestamp` set to `timestamp` (``DispatchMachine/timestamp(for:key:)``),
    /// and its `aps.stale-date` raised to it when it was earlier (a stale date is never before the
    /// timestamp: the content was stale already when it was stamped), written as
    /// ``withoutAlert(_:)`` writes it; `nil` when it has no `aps` object (content-service never
    /// writes one without).
    static func restamped(_ payload: String, timestamp: Int64) -> String? {
        editingAPS(payload) { aps in
            aps["timestamp"] = .integer(timestamp)
            if case .integer(let stale)? = aps["stale-date"], stale < timestamp { aps["stale-date"] = .integer(timestamp) }
        }
    }
}

/// The engine, not kept alive by the token table's observer.
private final class WeakEngine: Sendable {
    weak let value: DispatchEngine?
    init(_ value: DispatchEngine) { self.value = value }
}
