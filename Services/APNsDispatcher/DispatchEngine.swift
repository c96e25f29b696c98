import Foundation
import IsletMessages
import IsletTokens
import Logging
import Metrics
import NIOCore

/// Sends pushes to APNs. ``APNsClient`` in production; tests may script answers.
public protocol APNsSending: Sendable {
    func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer
    func renewProviderToken(teamID: String)
    func reconnect(teamID: String)
}

extension APNsClient: APNsSending {}

/// Where outcomes go: `islet.push-outcomes.v1`. Returns once persisted.
public protocol OutcomeSink: Sendable {
    func publish(_ outcome: PushOutcome) async throws
}

/// The dispatcher's rules, in one place.
public struct DispatcherPolicy: Sendable {
    public var budgets = BudgetPolicy()
    public var retry = RetryPolicy()
    /// At most this many pushes wait for APNs's answer at once (over all connections).
    public var maximumInFlight = 1_024
    /// At most this many requests wait in the activities' queues; reading more input waits.
    public var maximumQueued = 20_000
    /// A request whose key has no token yet waits for one — the app registers it over HTTP while the
    /// backend's event travels Kafka, and a remotely started activity gets its token only once iOS
    /// started it — at most this long, and never past its `apns-expiration`. Newer content for the
    /// activity replaces it meanwhile (coalesced). A request still without a token then ends as
    /// `awaitingToken` (never `tokenInvalid`: nothing says the activity is gone).
    public var tokenWait: Duration = .seconds(120)
    /// At most this many activities wait for their token at once (their requests do not count
    /// against ``maximumQueued``: activities without a token must not hold up everyone's input);
    /// past it, the one whose wait ends first ends as `awaitingToken` at once.
    public var maximumAwaitingToken = 50_000
    /// Updates to activities older than this are not sent: iOS stops showing updates after 8 hours.
    public var activityLifetime: Duration = .seconds(8 * 3_600)
    /// After APNs refused a team's credentials (403), its pushes are held this long; then one is
    /// sent to probe whether APNs accepts them again, and the others wait for its answer.
    public var laneCooldown: Duration = .seconds(60)

    public init() {}
}

/// The heart of apns-dispatcher: per-activity queues, budgets, coalescing, guards, retries and
/// the outcome of every request. An actor: its state changes one step at a time; sends, timers
/// and outcome publishing run as jobs of ``run()``.
public actor DispatchEngine {
    private struct Slot {
        var queue = ActivityQueue()
        var inFlight: QueuedRequest?
        /// Nothing is sent before this (a retry's backoff, or 429 TooManyRequests for the token).
        var notBefore: Date?
        /// A wake-up is scheduled for then.
        var wakeAt: Date?
        var budget: Budget?
        /// Since when a critical update has been waiting for budget.
        var waitingSince: Date?
        /// An `end` was delivered: later updates are pointless.
        var ended = false
        var endedAt: Date?
    }

    /// A team whose credentials APNs refused (a 403 other than ExpiredProviderToken). Its pushes
    /// are held in their queues, not sent and not given up, until `until`; then one request probes
    /// the lane while the others wait for its answer. An answer that shows the credentials were
    /// accepted reopens the lane; another refusal starts the cooldown again; an answer that says
    /// nothing about them (5xx, a provider-token problem, no answer) lets another request probe.
    /// A held request keeps its bounds: its `expiration`, and the retry policy's deadline.
    private struct StoppedLane {
        var until: Date
        /// APNs's reason for the last refusal.
        var reason: String
        /// The request id of the probe in flight.
        var probe: String?
        /// The activities whose next request is held: pumped again when the probe is answered.
        var held: Set<String> = []
    }

    private let sender: any APNsSending
    private let tokens: TokenTable
    private let outcomes: any OutcomeSink
    private let policy: DispatcherPolicy
    private let teams: [String: String]
    private let clock: any WallClock
    private let random: @Sendable () -> Double
    private let logger: Logger
    private let onDone: @Sendable (UInt64) -> Void
    private let metrics = DispatcherMetrics()

    private var slots: [String: Slot] = [:]
    /// Tokens APNs declared dead, by key, until token-registry's invalidation reaches the table
    /// (or the app registers the token again: a later registration time revives it).
    private var deadTokens: [String: DeadToken] = [:]
    private var pushToStartBudgets: [String: Budget] = [:]
    private var stoppedLanes: [String: StoppedLane] = [:]
    private var inFlight = 0
    private var queued = 0
    /// Activities whose first request waits for a token: when that wait ends, and how many of the
    /// `queued` requests they hold (``awaitingRequests`` in all; not counted for backpressure).
    private var awaiting: [String: (until: Date, requests: Int)] = [:]
    private var awaitingRequests = 0
    /// When the next check of the waits that ended is scheduled.
    private var awaitingCheckAt: Date?
    private var ready: [String] = []
    private var readySet: Set<String> = []
    private var submitWaiters: [CheckedContinuation<Void, Never>] = []
    private var accepting = true
    private var publishing = 0
    private var drainWaiters: [CheckedContinuation<Void, Never>] = []
    private var finished: Set<String> = []
    /// The request ids this engine gave a final outcome to, most recent 100,000: a copy read again
    /// (its partition lost in a broker stall and assigned back before the outcome was on the topic
    /// for ``alreadyFinished(_:unansweredStarts:)`` to see) is not sent again.
    private var ownFinished = RecentIDs(capacity: 100_000)
    private var unansweredStarts: Set<String> = []

    private let jobs: AsyncStream<@Sendable () async -> Void>
    private let jobsContinuation: AsyncStream<@Sendable () async -> Void>.Continuation

    /// - Parameters:
    ///   - teams: the team id that signs for each bundle id.
    ///   - onDone: called with a request's ticket once its outcome is persisted (or it needed none).
    public init(
        sender: any APNsSending, tokens: TokenTable, outcomes: any OutcomeSink, policy: DispatcherPolicy, teams: [String: String],
        clock: any WallClock = SystemWallClock(), random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        logger: Logger, onDone: @escaping @Sendable (UInt64) -> Void
    ) {
        self.sender = sender
        self.tokens = tokens
        self.outcomes = outcomes
        self.policy = policy
        self.teams = teams
        self.clock = clock
        self.random = random
        self.logger = logger
        self.onDone = onDone
        (jobs, jobsContinuation) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
        // A token a request waits for arrives: that activity is looked at again (no polling).
        let engine = WeakEngine(self)
        tokens.onApply { [jobsContinuation] key in
            jobsContinuation.yield { await engine.value?.tokenArrived(key) }
        }
    }

    /// Runs the engine's jobs until ``finish()``.
    public func run() async {
        let jobs = self.jobs
        await withDiscardingTaskGroup { group in
            for await job in jobs {
                group.addTask { await job() }
            }
            // Finished: what is left are timers (and sends or publishes a drain timed out on).
            group.cancelAll()
        }
    }

    /// Ends ``run()``; jobs still running are cancelled.
    public func finish() {
        accepting = false
        jobsContinuation.finish()
        for waiter in submitWaiters { waiter.resume() }
        submitWaiters.removeAll()
    }

    /// Stops taking new requests and waits until no push is in flight and every outcome is
    /// persisted, at most `timeout`. Requests still waiting in queues get no outcome: their input
    /// is not marked processed, so they are read again after the restart.
    public func drain(timeout: Duration) async {
        accepting = false
        for waiter in submitWaiters { waiter.resume() }
        submitWaiters.removeAll()
        guard inFlight > 0 || publishing > 0 else { return }
        let deadline = clock.date.addingTimeInterval(timeout / .seconds(1))
        jobsContinuation.yield { [weak self] in
            try? await self?.clock.sleep(untilDate: deadline)
            await self?.releaseDrainWaiters()
        }
        await withCheckedContinuation { drainWaiters.append($0) }
    }

    private func releaseDrainWaiters() {
        for waiter in drainWaiters { waiter.resume() }
        drainWaiters.removeAll()
    }

    private func checkDrained() {
        if !accepting, inFlight == 0, publishing == 0 { releaseDrainWaiters() }
    }

    /// Request ids whose outcome is already on the topic (read at assignment): not sent again.
    /// `unansweredStarts`: push-to-starts sent before a crash whose answer is unknown: they get
    /// `failed` instead of a second send (which could start a second activity).
    public func alreadyFinished(_ requestIds: some Sequence<String>, unansweredStarts: some Sequence<String> = [String]()) {
        finished.formUnion(requestIds)
        self.unansweredStarts.formUnion(unansweredStarts)
        self.unansweredStarts.subtract(finished)
    }

    /// Takes a request. Returns at once unless too many requests are waiting (then it waits:
    /// backpressure on the input). Returns `false` when a drain began: the request was not taken
    /// (its ticket will never be done; the next owner reads it again).
    @discardableResult
    public func submit(_ request: PushRequest, ticket: UInt64) async -> Bool {
        while accepting && queued - awaitingRequests >= policy.maximumQueued {
            await withCheckedContinuation { submitWaiters.append($0) }
        }
        guard accepting else { return false }
        take(request, ticket: ticket)
        return true
    }

    private func take(_ request: PushRequest, ticket: UInt64) {
        metrics.received(request)
        let now = clock.date
        let entry = QueuedRequest(request: request, ticket: ticket, enqueuedAt: now)
        if finished.contains(request.requestId) || ownFinished.contains(request.requestId) {
            // Sent before a restart: its outcome is on the topic already.
            metrics.duplicate()
            onDone(ticket)
            return
        }
        if unansweredStarts.remove(request.requestId) != nil {
            return finish(entry, .failed, detail: Self.unknownStartAnswer + " (sent before a restart)")
        }
        guard let key = request.key else { return finish(entry, .rejected, detail: "no activity id or push-to-start key") }
        var slot = slots[key, default: Slot()]
        if slot.ended && request.event != .start {
            return finish(entry, .expired, detail: "the activity has ended: nothing is sent after its end")
        }
        queued += 1
        for replaced in slot.queue.enqueue(entry) {
            queued -= 1
            finish(replaced.request, .coalesced, supersededBy: replaced.by, detail: "replaced by newer content")
        }
        slots[key] = slot
        pump(key)
    }

    /// Drops the waiting requests whose tickets match (their partitions were revoked: the next
    /// owner reads them again). Returns their tickets.
    public func dropWaiting(where matches: @Sendable (UInt64) -> Bool) -> [UInt64] {
        var dropped: [UInt64] = []
        for key in Array(slots.keys) {
            let removed = slots[key]!.queue.removeAll { matches($0.ticket) }
            queued -= removed.count
            if let waiting = awaiting[key] { setAwaiting(key, until: waiting.until, requests: slots[key]!.queue.pending.count) }
            dropped += removed.map(\.ticket)
            if slots[key]!.queue.isEmpty && slots[key]!.inFlight == nil && !slots[key]!.ended { slots[key] = nil }
        }
        resumeSubmitters()
        return dropped
    }

    // MARK: Sending

    /// Sends the activity's first waiting request if nothing stops it; otherwise schedules a retry
    /// of this decision for when something may have changed. Once a drain began, nothing new is
    /// sent: a send started then could be cut off by the shutdown after it reached APNs, without
    /// an outcome, and be sent again by the next owner.
    private func pump(_ key: String) {
        guard accepting else { return }
        while true {
            guard var slot = slots[key], slot.inFlight == nil, let head = slot.queue.first else {
                setAwaiting(key, until: nil)
                return
            }
            let now = clock.date
            if let notBefore = slot.notBefore {
                if notBefore > now { return wake(key, at: notBefore) }
                slot.notBefore = nil
                slots[key] = slot
            }
            switch check(head, key: key, queued: slot.queue.pending.count, now: now) {
            case .finished:
                continue
            case .held:
                return
            case .ready(let record, let team):
                // A send slot, then the priority the budget allows.
                guard inFlight < policy.maximumInFlight else {
                    if readySet.insert(key).inserted { ready.append(key) }
                    return
                }
                guard let (priority, downgraded) = takeBudget(for: head.request, key: key, record: record, now: now) else { return }
                startSending(key, record: record, team: team, priority: priority, downgraded: downgraded, now: now)
                return
            }
        }
    }

    /// What becomes of an activity's first waiting request, before a send slot and the budget.
    private enum Check {
        /// It has its outcome (or was a copy of a finished one): look at the next.
        case finished
        /// It waits (for its token, for a stopped lane); it is looked at again when that may change.
        case held
        /// Its token is usable and its team known.
        case ready(TokenRecord, team: String)
    }

    /// The request's token (present, active, not refused by APNs), its bounds (lifetime,
    /// expiration), its team's key and lane.
    private func check(_ head: QueuedRequest, key: String, queued: Int, now: Date) -> Check {
        let request = head.request
        // A copy of a request that finished while this one waited behind it (read again after
        // its partition came back): its outcome is on its way to the topic already.
        if ownFinished.contains(request.requestId) {
            dropHead(key)
            metrics.duplicate()
            onDone(head.ticket)
            return .finished
        }
        guard let record = tokens.record(forKey: key) else {
            // Looked at again when its token arrives (``tokenArrived(_:)``), or when the wait ends.
            let waitEnd = min(head.enqueuedAt.addingTimeInterval(policy.tokenWait / .seconds(1)), request.expiration ?? .distantFuture)
            if now < waitEnd {
                setAwaiting(key, until: waitEnd, requests: queued)
                return .held
            }
            setAwaiting(key, until: nil)
            return drop(head, key: key, .awaitingToken, "no token was registered for the activity while the content was current")
        }
        setAwaiting(key, until: nil)
        guard record.state == .active, !(deadTokens[key]?.kills(record) ?? false) else {
            return drop(head, key: key, .tokenInvalid, "the token is \(record.state == .active ? "refused by APNs" : record.state.rawValue)")
        }
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
        return holdForLane(head, key: key, team: team, now: now) ?? .ready(record, team: team)
    }

    private func drop(_ head: QueuedRequest, key: String, _ result: PushResult, _ detail: String) -> Check {
        dropHead(key)
        finish(head, result, detail: detail)
        return .finished
    }

    /// A stopped lane holds its team's requests during the cooldown and while its probe is in
    /// flight, within each request's bounds; `nil` when the team's lane is open.
    private func holdForLane(_ head: QueuedRequest, key: String, team: String, now: Date) -> Check? {
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

    /// The priority `request` goes out with now (and whether that is a downgrade), taken from its
    /// device's push-to-start budget or its activity's budget (``PriorityDecision``); `nil` when it
    /// must wait (a wake-up is scheduled).
    private func takeBudget(for request: PushRequest, key: String, record: TokenRecord, now: Date) -> (priority: Int, downgraded: Bool)? {
        if request.pushToStartKey != nil, let deviceId = record.deviceId {
            let device = "\(record.app.bundleId):\(deviceId)"
            var budget = pushToStartBudgets[device] ?? Budget(limits: policy.budgets.pushToStart, now: now)
            defer { pushToStartBudgets[device] = budget }
            guard budget.take(now: now) else {
                wake(key, at: budget.nextAvailable(now: now))
                return nil
            }
            return (request.priority, false)
        }
        guard var slot = slots[key] else { return nil }
        let limits = policy.budgets.limits(bundleId: record.app.bundleId, frequentUpdates: record.frequentUpdatesEnabled)
        var budget = slot.budget ?? Budget(limits: limits, now: now)
        if budget.limits != limits { budget.setLimits(limits, now: now) }
        let decision = PriorityDecision.decide(
            requested: request.priority, urgency: request.urgency, budget: &budget, waitingSince: slot.waitingSince ?? now, now: now,
            policy: policy.budgets)
        slot.budget = budget
        switch decision {
        case .wait(let until):
            slot.waitingSince = slot.waitingSince ?? now
            slots[key] = slot
            wake(key, at: until)
            return nil
        case .send(let chosen, let isDowngrade):
            slots[key] = slot
            if request.priority == 10 { metrics.budgetRemaining(budget.remaining(now: now)) }
            return (chosen, isDowngrade)
        }
    }

    /// Takes the activity's first request out of its queue and sends it.
    private func startSending(_ key: String, record: TokenRecord, team: String, priority: Int, downgraded: Bool, now: Date) {
        guard var slot = slots[key] else { return }
        var sending = slot.queue.removeFirst()
        if stoppedLanes[team] != nil {
            // The cooldown is over: this request probes the lane; the team's others wait for its answer.
            stoppedLanes[team]?.probe = sending.request.requestId
        }
        queued -= 1
        sending.attempts += 1
        sending.firstAttemptAt = sending.firstAttemptAt ?? now
        slot.inFlight = sending
        slot.waitingSince = nil
        slots[key] = slot
        inFlight += 1
        metrics.inFlight(inFlight)
        resumeSubmitters()
        send(sending, key: key, record: record, team: team, priority: priority, downgraded: downgraded)
    }

    /// Notes that `key`'s first request waits for a token until `until` (`nil`: it does not wait),
    /// holding `requests` of the queued requests; schedules the check of the waits that end.
    private func setAwaiting(_ key: String, until: Date?, requests: Int = 0) {
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
        resumeSubmitters()
        if awaitingCheckAt.map({ until < $0 }) ?? true {
            awaitingCheckAt = until
            let clock = self.clock
            jobsContinuation.yield { [weak self] in
                try? await clock.sleep(untilDate: until)
                await self?.checkAwaiting(scheduledAt: until)
            }
        }
    }

    /// The waits that ended: their requests end as `awaitingToken` (and the next in line is looked at).
    private func checkAwaiting(scheduledAt: Date) {
        if awaitingCheckAt == scheduledAt { awaitingCheckAt = nil }
        let now = clock.date
        for (key, waiting) in awaiting where waiting.until <= now { pump(key) }
        if awaitingCheckAt == nil, let next = awaiting.values.map(\.until).min() {
            awaitingCheckAt = next
            let clock = self.clock
            jobsContinuation.yield { [weak self] in
                try? await clock.sleep(untilDate: next)
                await self?.checkAwaiting(scheduledAt: next)
            }
        }
    }

    /// Ends every request of `key` that waits for a token, now.
    private func giveUpWaiting(_ key: String, detail: String) {
        setAwaiting(key, until: nil)
        guard slots[key] != nil else { return }
        let waiting = slots[key]!.queue.removeAll { _ in true }
        queued -= waiting.count
        for entry in waiting { finish(entry, .awaitingToken, detail: detail) }
        resumeSubmitters()
    }

    /// A token record was applied to the table: if requests wait for it, they go now.
    private func tokenArrived(_ key: String) {
        if awaiting[key] != nil { pump(key) }
    }

    /// A token APNs declared dead: its fingerprint and the registration time of the record it was
    /// sent from. A record registered later (the app registered the token again) is alive.
    private struct DeadToken {
        var fingerprint: String
        var registeredAt: Date
        var at: Date

        func kills(_ record: TokenRecord) -> Bool {
            record.registeredAt <= registeredAt && TokenFingerprint.of(token: record.token) == fingerprint
        }
    }

    private func send(_ entry: QueuedRequest, key: String, record: TokenRecord, team: String, priority: Int, downgraded: Bool) {
        let request = entry.request
        let payload = entry.ambiguous && request.alerting ? Self.withoutAlert(request.payload) : request.payload
        let push = APNsPush(
            deviceToken: record.token, topic: "\(record.app.bundleId).push-type.liveactivity", priority: priority, apnsID: request.requestId,
            expiration: request.expiration.map { Int64($0.timeIntervalSince1970) } ?? 0, payload: ByteBuffer(string: payload))
        let sender = self.sender
        let environment = record.app.environment
        let fingerprint = TokenFingerprint.of(token: record.token)
        let started = ContinuousClock.now
        // A push-to-start is announced on the outcomes topic (and acknowledged) before its first
        // send: after a crash, the next owner knows it may have been delivered and does not send it again.
        let announcement: PushOutcome? =
            Self.isPushToStart(request) && entry.attempts == 1
            ? PushOutcome(
                requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: .sending, attempts: 1,
                tokenFingerprint: fingerprint, detail: "push-to-start about to be sent", completedAt: clock.date, bundleId: request.app.bundleId,
                attributesType: request.attributesType)
            : nil
        let (outcomes, logger) = (self.outcomes, self.logger)
        jobsContinuation.yield { [weak self] in
            if let announcement { await Self.persist(announcement, to: outcomes, logger: logger) }
            let result: Result<APNsAnswer, any Error>
            do {
                result = .success(try await sender.send(push, teamID: team, environment: environment))
            } catch {
                result = .failure(error)
            }
            await self?.completed(
                entry, key: key, team: team, fingerprint: fingerprint, registeredAt: record.registeredAt, priority: priority,
                downgraded: downgraded, result: result, seconds: (ContinuousClock.now - started) / .seconds(1))
        }
    }

    private func completed(
        _ entry: QueuedRequest, key: String, team: String, fingerprint: String, registeredAt: Date, priority: Int, downgraded: Bool,
        result: Result<APNsAnswer, any Error>, seconds: Double
    ) {
        inFlight -= 1
        metrics.inFlight(inFlight)
        slots[key]?.inFlight = nil
        let attempt = Attempt(entry: entry, key: key, team: team, fingerprint: fingerprint, priority: priority, now: clock.date)
        // Whether APNs accepted the team's credentials (for a stopped lane's probe).
        var credentialsAccepted = false
        switch result {
        case .success(let answer):
            metrics.answer(status: answer.status, priority: priority, seconds: seconds)
            credentialsAccepted = answered(attempt, answer, registeredAt: registeredAt, downgraded: downgraded)
        case .failure(let error):
            unanswered(attempt, error)
        }
        if stoppedLanes[team]?.probe == entry.request.requestId {
            probeAnswered(team, credentialsAccepted: credentialsAccepted)
        }
        checkDrained()
        pumpReady()
        pump(key)
    }

    /// One send of a request, as its answer is handled.
    private struct Attempt {
        var entry: QueuedRequest
        var key: String
        var team: String
        var fingerprint: String
        var priority: Int
        var now: Date
    }

    /// Does what APNs's answer asks (the one answer table, ``APNsAction``); returns whether the
    /// answer accepted the team's credentials.
    private func answered(_ attempt: Attempt, _ answer: APNsAnswer, registeredAt: Date, downgraded: Bool) -> Bool {
        var entry = attempt.entry
        let (key, team, now, apns) = (attempt.key, attempt.team, attempt.now, answer.response)
        let (priority, fingerprint) = (attempt.priority, attempt.fingerprint)
        let action = APNsAction.forAnswer(status: answer.status, reason: answer.reason)
        switch action {
        case .delivered:
            // Ended first: finishing may forget an idle activity, and its end must be remembered.
            if entry.request.event == .end { ended(key) }
            finish(entry, downgraded ? .deliveredDowngraded : .delivered, apns: apns, priority: priority, fingerprint: fingerprint)
        case .tokenInvalid:
            deadTokens[key] = DeadToken(fingerprint: fingerprint, registeredAt: registeredAt, at: now)
            finish(entry, .tokenInvalid, apns: apns, priority: priority, fingerprint: fingerprint, detail: "APNs: \(answer.reason ?? "")")
        case .rejected:
            finish(entry, .rejected, apns: apns, priority: priority, fingerprint: fingerprint, detail: "APNs: \(answer.reason ?? "")")
        case .renewProviderToken:
            guard !entry.renewedProviderToken else {
                finish(entry, .rejected, apns: apns, priority: priority, fingerprint: fingerprint, detail: "ExpiredProviderToken after a renewal")
                break
            }
            entry.renewedProviderToken = true
            sender.renewProviderToken(teamID: team)
            requeue(entry, key: key, at: now)
        case .stopLane:
            // Held, not finished: a start or an end lost to a credential hiccup is an activity
            // that never appears or never ends. Sent again once the lane reopens.
            let reason = answer.reason ?? "403"
            if entry.attempts >= policy.retry.maximumAttempts {
                finish(
                    entry, .failed, apns: apns, priority: priority, fingerprint: fingerprint,
                    detail: "gave up after \(entry.attempts) attempts: APNs refused team \(team)'s credentials (\(reason))")
            } else {
                requeue(entry, key: key, at: now)
            }
            stopLane(team, reason: reason, refused: entry.request.requestId, now: now)
        case .backOffToken:
            slots[key]?.notBefore = now.addingTimeInterval(policy.retry.tokenBackoff / .seconds(1))
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint, minimumDelay: policy.retry.tokenBackoff)
        case .providerTokenChurn:
            sender.reconnect(teamID: team)
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint)
        case .retry:
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint)
        }
        return action.acceptsCredentials
    }

    /// No answer from APNs: retried, unless it may have been delivered and was a push-to-start (a
    /// resend could start a second activity).
    private func unanswered(_ attempt: Attempt, _ error: any Error) {
        var entry = attempt.entry
        let transport = error as? APNsTransportError
        metrics.transportError(transport?.kind)
        if transport?.isAmbiguous ?? true {
            entry.ambiguous = true
            if Self.isPushToStart(entry.request) {
                finish(entry, .failed, priority: attempt.priority, fingerprint: attempt.fingerprint, detail: Self.unknownStartAnswer + ": \(error)")
                return
            }
        }
        retry(entry, key: attempt.key, apns: nil, priority: attempt.priority, fingerprint: attempt.fingerprint, detail: "\(error)")
    }

    /// APNs refused a team's credentials: its pushes are held for the cooldown (from now, also when
    /// the lane was stopped already).
    private func stopLane(_ team: String, reason: String, refused requestId: String, now: Date) {
        let until = now.addingTimeInterval(policy.laneCooldown / .seconds(1))
        var lane = stoppedLanes[team] ?? StoppedLane(until: until, reason: reason)
        lane.until = until
        lane.reason = reason
        let probed = lane.probe == requestId
        if probed { lane.probe = nil }
        stoppedLanes[team] = lane
        logger.error(
            "APNs refused the team's credentials: its pushes are held until one probe is accepted",
            metadata: ["apns.team": "\(team)", "apns.reason": "\(reason)", "apns.lane.probe.at": "\(IsletDate.format(until))"])
        metrics.laneStopped(team: team)
        // The held activities wait for the new reopening time instead of the probe's answer.
        if probed { pumpHeld(team) }
    }

    /// A stopped lane's probe got an answer that is not a refusal (or got none): the lane reopens
    /// if the answer shows the credentials were accepted; otherwise another request probes it.
    /// Either way the held activities are pumped again.
    private func probeAnswered(_ team: String, credentialsAccepted: Bool) {
        if credentialsAccepted {
            let lane = stoppedLanes.removeValue(forKey: team)
            logger.info("APNs accepted the team's credentials again: its held pushes are sent", metadata: ["apns.team": "\(team)"])
            for key in lane?.held ?? [] { pump(key) }
        } else {
            stoppedLanes[team]?.probe = nil
            pumpHeld(team)
        }
    }

    /// Pumps a stopped lane's held activities again (those still held note themselves again).
    private func pumpHeld(_ team: String) {
        let held = stoppedLanes[team]?.held ?? []
        stoppedLanes[team]?.held = []
        for key in held { pump(key) }
    }

    /// Another attempt later, within the retry policy's bounds; otherwise the final outcome.
    private func retry(
        _ entry: QueuedRequest, key: String, apns: PushOutcome.APNsResponse?, priority: Int, fingerprint: String, detail: String? = nil,
        minimumDelay: Duration = .zero
    ) {
        let now = clock.date
        let deadline = policy.retry.deadline(expiration: entry.request.expiration, firstAttempt: entry.firstAttemptAt ?? now)
        let delay = max(policy.retry.delay(afterAttempts: entry.attempts, random: random()), minimumDelay)
        let at = now.addingTimeInterval(delay / .seconds(1))
        guard entry.attempts < policy.retry.maximumAttempts, at <= deadline else {
            let expired = entry.request.expiration.map { $0 <= at } ?? false
            finish(
                entry, expired ? .expired : .failed, apns: apns, priority: priority, fingerprint: fingerprint,
                detail: "gave up after \(entry.attempts) attempts" + (detail.map { ": \($0)" } ?? apns.map { ": APNs \($0.status) \($0.reason ?? "")" } ?? ""))
            return
        }
        metrics.retried()
        requeue(entry, key: key, at: at)
    }

    /// Puts an attempted request back in front of its activity's queue, to be sent at `at` — unless
    /// newer content (or an end) is waiting, which makes it pointless.
    private func requeue(_ entry: QueuedRequest, key: String, at: Date) {
        guard var slot = slots[key] else { return }
        if ActivityQueue.isSupersedableUpdate(entry.request),
            let newer = slot.queue.pending.first(where: {
                $0.request.event == .end || (ActivityQueue.isSupersedableUpdate($0.request) && $0.request.contentSequence >= entry.request.contentSequence)
            })
        {
            finish(entry, .coalesced, supersededBy: newer.request.requestId, detail: "replaced by newer content while waiting to be retried")
            return
        }
        slot.queue.returnToFront(entry)
        queued += 1
        slot.notBefore = max(slot.notBefore ?? at, at)
        slots[key] = slot
    }

    /// An `end` was delivered: updates still waiting are pointless.
    private func ended(_ key: String) {
        var slot = slots[key] ?? Slot()
        slot.ended = true
        slot.endedAt = clock.date
        let pointless = slot.queue.removeAll { $0.request.event != .start }
        queued -= pointless.count
        slots[key] = slot
        for entry in pointless { finish(entry, .expired, detail: "the activity has ended: nothing is sent after its end") }
    }

    private func dropHead(_ key: String) {
        guard slots[key] != nil else { return }
        _ = slots[key]!.queue.removeFirst()
        queued -= 1
        resumeSubmitters()
    }

    private func wake(_ key: String, at date: Date) {
        if let scheduled = slots[key]?.wakeAt, scheduled <= date { return }
        slots[key]?.wakeAt = date
        let clock = self.clock
        jobsContinuation.yield { [weak self] in
            try? await clock.sleep(untilDate: date)
            await self?.woke(key, at: date)
        }
    }

    private func woke(_ key: String, at date: Date) {
        if slots[key]?.wakeAt == date { slots[key]?.wakeAt = nil }
        pump(key)
    }

    private func pumpReady() {
        while accepting, inFlight < policy.maximumInFlight, !ready.isEmpty {
            let key = ready.removeFirst()
            readySet.remove(key)
            pump(key)
        }
    }

    private func resumeSubmitters() {
        while queued - awaitingRequests < policy.maximumQueued, !submitWaiters.isEmpty {
            submitWaiters.removeFirst().resume()
        }
    }

    // MARK: Outcomes

    /// Publishes the request's one final outcome, then reports its ticket done.
    private func finish(
        _ entry: QueuedRequest, _ result: PushResult, apns: PushOutcome.APNsResponse? = nil, priority: Int? = nil, fingerprint: String? = nil,
        supersededBy: String? = nil, detail: String? = nil
    ) {
        let request = entry.request
        let now = clock.date
        let outcome = PushOutcome(
            requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: result, apns: apns,
            priorityUsed: apns == nil ? nil : priority, attempts: entry.attempts,
            latencyMilliseconds: apns == nil ? nil : max(0, now.timeIntervalSince(request.createdAt) * 1_000), tokenFingerprint: fingerprint,
            supersededBy: supersededBy, detail: detail, completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType)
        metrics.outcome(result)
        ownFinished.insert(request.requestId)
        if let key = request.key { forgetIfIdle(key, now: now) }
        publishing += 1
        let (outcomes, onDone, ticket, logger) = (self.outcomes, self.onDone, entry.ticket, self.logger)
        jobsContinuation.yield { [weak self] in
            await Self.persist(outcome, to: outcomes, logger: logger)
            onDone(ticket)
            await self?.published()
        }
    }

    /// Publishes an outcome record, retrying with backoff until Kafka acknowledges it (or the task is cancelled).
    private static func persist(_ outcome: PushOutcome, to outcomes: any OutcomeSink, logger: Logger) async {
        var delay = Duration.milliseconds(100)
        while true {
            do {
                try await outcomes.publish(outcome)
                return
            } catch {
                logger.warning("outcome not persisted; retrying", metadata: ["outcome.requestId": "\(outcome.requestId)", "error": "\(error)"])
                do { try await Task.sleep(for: delay) } catch { return }
                delay = min(delay * 2, .seconds(5))
            }
        }
    }

    static func isPushToStart(_ request: PushRequest) -> Bool { request.pushToStartKey != nil && request.event == .start }

    static let unknownStartAnswer = "a push-to-start whose answer is unknown is not sent again, so that it can never start two activities"

    /// An activity with nothing waiting and nothing to remember (its budget full) is forgotten now;
    /// the others are looked at again by the periodic sweep.
    private func forgetIfIdle(_ key: String, now: Date) {
        if let slot = slots[key], Self.isForgettable(slot, now: now) { slots[key] = nil }
        sweep(now: now)
    }

    /// A slot that says nothing a fresh one would not: nothing waiting, in flight or scheduled, no
    /// backoff still running, not ended, and its budget full again.
    private static func isForgettable(_ slot: Slot, now: Date) -> Bool {
        guard slot.queue.isEmpty, slot.inFlight == nil, slot.wakeAt == nil, !slot.ended, (slot.notBefore ?? now) <= now else { return false }
        guard var budget = slot.budget else { return true }
        return budget.remaining(now: now) >= budget.limits.capacity
    }

    private var lastSweep = Date.distantPast

    /// At most every 10 minutes (on the engine's clock), whenever an outcome is finished: forgets the
    /// idle activities whose budget has refilled, those that ended more than 12 hours ago (iOS has
    /// removed them by then; a late update is stopped by the 8-hour lifetime guard), and the
    /// push-to-start budgets that are full again. Without it, an activity that spent budget and then
    /// got no more requests would be remembered for ever.
    private func sweep(now: Date) {
        guard now.timeIntervalSince(lastSweep) > 600 else { return }
        lastSweep = now
        let horizon = now.addingTimeInterval(-12 * 3_600)
        slots = slots.filter { _, slot in
            if slot.ended { return !((slot.endedAt ?? now) < horizon && slot.queue.isEmpty && slot.inFlight == nil) }
            return !Self.isForgettable(slot, now: now)
        }
        // By now token-registry has invalidated them (within seconds), or the app registered them again.
        deadTokens = deadTokens.filter { now.timeIntervalSince($0.value.at) < 3_600 }
        pushToStartBudgets = pushToStartBudgets.filter { _, budget in
            var budget = budget
            return budget.remaining(now: now) < budget.limits.capacity
        }
    }

    /// How many activities and push-to-start devices the engine remembers (for tests: it must not
    /// grow with every activity ever seen).
    var remembered: (activities: Int, pushToStartDevices: Int) { (slots.count, pushToStartBudgets.count) }

    private func published() {
        publishing -= 1
        checkDrained()
    }

    /// The payload without `aps.alert` and `aps.sound`, for a resend that may reach the phone twice.
    static func withoutAlert(_ payload: String) -> String {
        guard case .object(var root)? = try? JSONDecoder().decode(JSONValue.self, from: Data(payload.utf8)),
            case .object(var aps)? = root["aps"]
        else { return payload }
        aps["alert"] = nil
        aps["sound"] = nil
        root["aps"] = .object(aps)
        guard let data = try? JSONEncoder().encode(JSONValue.object(root)) else { return payload }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A set of the most recent `capacity` ids (the oldest is forgotten first).
struct RecentIDs {
    private var members: Set<String> = []
    private var order: [String] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func contains(_ id: String) -> Bool { members.contains(id) }

    mutating func insert(_ id: String) {
        guard members.insert(id).inserted else { return }
        if order.count < capacity {
            order.append(id)
        } else {
            members.remove(order[head])
            order[head] = id
            head = (head + 1) % capacity
        }
    }
}

/// The engine, not kept alive by the token table's observer.
private final class WeakEngine: Sendable {
    weak let value: DispatchEngine?
    init(_ value: DispatchEngine) { self.value = value }
}
