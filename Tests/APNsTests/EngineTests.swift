import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import APNsDispatcher
import NIOCore


/// Answers pushes from a script (per token) and records what was sent. As an ``APNsSending`` (for
/// the engine's driver) it can hold answers back until released.
final class ScriptedSender: APNsSending {
    private struct State {
        var sent: [APNsPush] = []
        var script: [String: [APNsAnswer]] = [:]
        var held = false
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
        var renewals = 0
        /// The renewals made before each push was sent, in order.
        var renewalsAtSend: [Int] = []
        var answers = 0
        var failures: [String: [APNsTransportError]] = [:]
        var channelsMade: [String] = []
        var channelsDeleted: [String] = []
        var channelRefusals: [APNsChannelError] = []
    }

    private let state = Mutex(State())

    var sent: [APNsPush] { state.withLock { $0.sent } }
    var renewals: Int { state.withLock { $0.renewals } }
    var renewalsAtSend: [Int] { state.withLock { $0.renewalsAtSend } }
    /// How many pushes were answered (or failed) so far.
    var answers: Int { state.withLock { $0.answers } }
    func script(_ token: String, _ answers: [APNsAnswer]) { state.withLock { $0.script[token, default: []] += answers } }
    /// The next pushes to `token` get no answer: these transport errors are thrown instead.
    func fail(_ token: String, _ errors: [APNsTransportError]) { state.withLock { $0.failures[token, default: []] += errors } }
    func hold() { state.withLock { $0.held = true } }
    func release() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.held = false
            defer { state.waiting.removeAll() }
            return Array(state.waiting.values)
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Notes a push as sent.
    func accept(_ push: APNsPush) {
        state.withLock { state in
            state.sent.append(push)
            state.renewalsAtSend.append(state.renewals)
        }
    }

    /// The scripted answer to a push (200 when nothing is scripted), or the scripted failure.
    func answer(to push: APNsPush) -> Result<APNsAnswer, any Error> {
        state.withLock { state in
            state.answers += 1
            if var errors = state.failures[push.recipient], !errors.isEmpty {
                defer { state.failures[push.recipient] = errors }
                return .failure(errors.removeFirst())
            }
            guard var answers = state.script[push.recipient], !answers.isEmpty else { return .success(APNsAnswer(status: 200, apnsID: push.apnsID)) }
            defer { state.script[push.recipient] = answers }
            return .success(answers.removeFirst())
        }
    }

    func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer {
        accept(push)
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        // Held until released, or until the send is cancelled (the engine finished).
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let held = state.withLock { state -> Bool in
                    guard state.held, !Task.isCancelled else { return false }
                    state.waiting[id] = continuation
                    return true
                }
                if !held { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiting.removeValue(forKey: id) }?.resume()
        }
        try Task.checkCancellation()
        return try answer(to: push).get()
    }

    func renewProviderToken(teamID: String) { state.withLock { $0.renewals += 1 } }
    func reconnect(teamID: String) {}

    /// Channels made and deleted, in order.
    var channelsMade: [String] { state.withLock { $0.channelsMade } }
    var channelsDeleted: [String] { state.withLock { $0.channelsDeleted } }
    /// The next channel creations are refused with these.
    func refuseChannels(_ refusals: [APNsChannelError]) { state.withLock { $0.channelRefusals += refusals } }

    func createChannel(bundleID: String, storagePolicy: APNsStoragePolicy, teamID: String, environment: APNsEnvironment) async throws -> String {
        try state.withLock { state in
            if !state.channelRefusals.isEmpty { throw state.channelRefusals.removeFirst() }
            let id = Data("channel-\(state.channelsMade.count + 1)".utf8).base64EncodedString()
            state.channelsMade.append(id)
            return id
        }
    }

    func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws {
        state.withLock { $0.channelsDeleted.append(channelID) }
    }
}

final class RecordingSink: OutcomeSink {
    private let outcomes = Mutex<[PushOutcome]>([])
    private let channelRecords = Mutex<[BroadcastChannelRecord]>([])
    var all: [PushOutcome] { outcomes.withLock { $0 } }
    var final: [PushOutcome] { all.filter(\.result.isFinal) }
    /// The broadcast channels' records persisted, in order.
    var channels: [BroadcastChannelRecord] { channelRecords.withLock { $0 } }
    func publish(_ outcome: PushOutcome) throws { record(outcome) }
    func record(_ outcome: PushOutcome) { outcomes.withLock { $0.append(outcome) } }
    func record(_ channel: BroadcastChannelRecord) { channelRecords.withLock { $0.append(channel) } }
}

/// The dispatch machine with a token table, a scripted APNs and a manual clock, driven one input
/// at a time: its actions are carried out at once (APNs answers at once, unless held), so after
/// each call a test sees where the machine stands. No tasks, no sleeps.
final class EngineHarness {
    let clock = ManualClock()
    let sender = ScriptedSender()
    let sink = RecordingSink()
    let tokens = PartitionTokens.forTests()
    /// Tickets reported done, in order.
    private(set) var done: [UInt64] = []
    /// Tickets left to their partition's next owner, in order.
    private(set) var abandoned: [UInt64] = []
    private(set) var machine: DispatchMachine
    private var holding = false
    private var held: [DispatchMachine.Attempt] = []
    private var nextTicket: UInt64 = 0
    /// Channels are not made until ``makeHeldChannels()`` (APNs is slow to answer).
    var holdingChannels = false
    private var heldChannels: [DispatchMachine.ChannelCreation] = []
    /// Outcomes are not persisted until ``persistHeld()`` (Kafka stalled).
    var holdingPublishes = false
    private var unpersisted: [(PushOutcome, UInt64, [UInt64])] = []
    /// How the next channel creations fail (`retryable`, detail), before they succeed.
    var channelFailures: [(retryable: Bool, detail: String)] = []
    /// Channel ids made, and deleted, in order.
    private(set) var channelsMade: [String] = []
    private(set) var channelsDeleted: [String] = []

    init(
        policy: DispatcherPolicy = DispatcherPolicy(), teams: [String: String] = ["com.example.food": "TEAM123456"], uncovered: Set<AppTarget> = [],
        signers: [AppTarget: String] = [:]
    ) {
        machine = DispatchMachine(tokens: tokens, policy: policy, teams: teams, random: { 0.5 }, logger: quietLogger, now: clock.date)
        machine.uncovered = uncovered
        machine.signers = signers
    }

    func register(
        _ activity: String, token: String, frequent: Bool = false, startedAt: Date? = nil, state: TokenState = .active, bundleId: String = "com.example.food"
    ) {
        let now = clock.date
        let key = MessageKey.activity(bundleId: bundleId, activityId: activity)
        tokens.put(
            TokenRecord(
                kind: .update, activityId: activity, userId: "u", token: token, app: AppTarget(bundleId: bundleId, environment: .production),
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: frequent, appVersion: "1.0", state: state,
                invalidation: state == .invalidated ? .init(reason: .clientEnded, invalidatedAt: now) : nil, activityStartedAt: startedAt ?? now,
                registeredAt: now, updatedAt: now),
            key: key)
        step { $0.tokenArrived(key, now: $1) }
    }

    func request(
        _ activity: String, _ event: ActivityEventKind = .update, sequence: Int64, priority: Int = 10, urgency: Urgency = .routine,
        supersedable: Bool? = nil, alerting: Bool = false, bundleId: String = "com.example.food"
    ) -> PushRequest {
        PushRequest(
            requestId: UUID().uuidString.lowercased(), activityId: activity, event: event, app: AppTarget(bundleId: bundleId, environment: .production),
            attributesType: "DeliveryAttributes", payload: payload(event: event.rawValue, alert: alerting, extra: #","sequence":\#(sequence)"#),
            priority: priority, urgency: urgency, supersedable: supersedable ?? (event == .update), alerting: alerting,
            apnsTimestamp: 1_795_000_000 + sequence, contentSequence: sequence, createdAt: clock.date)
    }

    func submit(_ request: PushRequest, partition: Int32? = nil) {
        nextTicket += 1
        let ticket = nextTicket
        step { $0.submit(request, ticket: ticket, partition: partition, now: $1) }
    }

    /// The machine's budgets, to look at or change.
    func budgets<T>(_ body: (inout BudgetBook) -> T) -> T { body(&machine.budgets) }

    func beginDrain() { machine.beginDrain() }

    func dropWaiting(where matches: (UInt64) -> Bool) -> [UInt64] { machine.dropWaiting(where: matches) }

    func alreadyFinished(_ requestIds: [String], maybeDelivered: [String] = []) {
        machine.alreadyFinished(requestIds, maybeDelivered: Dictionary(uniqueKeysWithValues: maybeDelivered.map { ($0, [""]) }))
    }

    /// What a partition's recent outcomes say, as the next owner reads them at its assignment.
    func alreadyFinished(_ ids: RecentOutcomes.Ids, partition: Int32? = nil) {
        machine.alreadyFinished(ids.finished, maybeDelivered: ids.announcements, floors: ids.floors, partition: partition)
    }

    func own(_ partitions: [Int32]) { machine.own(partitions) }

    /// The partitions went elsewhere (``DispatchEngine/disown(_:)``).
    func disown(_ partitions: [Int32]) { step { machine, _ in machine.disown(partitions); return [] } }

    /// Moves the clock on by `seconds`; the machine is woken if it asked to be by then.
    func advance(_ seconds: TimeInterval) {
        clock.advance(seconds)
        if let next = machine.nextWakeup, next <= clock.date { step { $0.timePassed(now: $1) } }
    }

    /// APNs answers nothing until ``release()``.
    func hold() { holding = true }

    /// APNs answers what it held back, in the order sent, each after `seconds`; `holdingOn`: what
    /// is sent meanwhile is held in turn.
    func release(after seconds: Double = 0, holdingOn: Bool = false) {
        holding = holdingOn
        let answering = held
        held.removeAll()
        for attempt in answering { step { $0.answered(attempt, sender.answer(to: attempt.push), seconds: seconds, now: $1) } }
    }

    /// Sends awaiting APNs's answer.
    var heldCount: Int { held.count }

    /// The first send held back, taken out (not to be answered).
    func takeHeld() -> DispatchMachine.Attempt { held.removeFirst() }

    /// A send not made: its partition was given up before it went (``DispatchMachine/withdrawn(_:announced:now:)``).
    func withdraw(_ attempt: DispatchMachine.Attempt, announced: Bool) {
        step { $0.withdrawn(attempt, announced: announced, now: $1) }
    }

    /// Whether the machine asked to be woken at exactly `date`.
    func isScheduled(_ date: Date) -> Bool { machine.plannedWakeups.contains(date) }

    /// The final outcomes published (a push-to-start's `sending` announcement is in `sink.all`,
    /// not here); a test issue unless there are at least `count`.
    @discardableResult
    func outcomes(_ count: Int, sourceLocation: SourceLocation = #_sourceLocation) -> [PushOutcome] {
        if sink.final.count < count {
            Issue.record("expected \(count) outcomes, got \(sink.final.count): \(sink.final.map(\.result.rawValue))", sourceLocation: sourceLocation)
        }
        return sink.final
    }

    /// Moves the clock on in steps until `condition` holds (at most 1,000 steps).
    func until(step seconds: TimeInterval = 0.05, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () -> Bool) {
        for _ in 0..<1_000 {
            if condition() { return }
            advance(seconds)
        }
        Issue.record("the condition did not hold in time", sourceLocation: sourceLocation)
    }

    /// One input, and everything it leads to: sends answered (unless held), outcomes persisted.
    private func step(_ input: (inout DispatchMachine, Date) -> [DispatchMachine.Action]) {
        var actions = input(&machine, clock.date)
        while !actions.isEmpty {
            switch actions.removeFirst() {
            case .send(let attempt):
                if let announcement = attempt.announcement { sink.record(announcement) }
                sender.accept(attempt.push)
                if holding {
                    held.append(attempt)
                } else {
                    actions += machine.answered(attempt, sender.answer(to: attempt.push), seconds: 0, now: clock.date)
                }
            case .publish(let outcome, let ticket, let copies):
                if holdingPublishes {
                    unpersisted.append((outcome, ticket, copies))
                    continue
                }
                sink.record(outcome)
                done.append(ticket)
                done += copies
                actions += machine.outcomePersisted(outcome.requestId, now: clock.date)
            case .release(let ticket):
                done.append(ticket)
            case .note(let note):
                sink.record(note)
                actions += machine.notePersisted(note, now: clock.date)
            case .abandon(let tickets):
                abandoned += tickets
            case .renewProviderToken(let team):
                sender.renewProviderToken(teamID: team)
            case .reconnect(let team):
                sender.reconnect(teamID: team)
            case .createChannel(let creation):
                if holdingChannels {
                    heldChannels.append(creation)
                } else if !channelFailures.isEmpty {
                    let failure = channelFailures.removeFirst()
                    actions += machine.channelNotCreated(creation.key, retryable: failure.retryable, detail: failure.detail, now: clock.date)
                } else {
                    let id = Data("channel-\(channelsMade.count + 1)".utf8).base64EncodedString()
                    channelsMade.append(id)
                    let record = BroadcastChannelRecord(
                        app: creation.app, activityId: creation.activityId, channelId: id, storagePolicy: creation.storagePolicy, createdAt: clock.date,
                        deleteAt: creation.deleteAt, writtenAt: clock.date)
                    sink.record(record)
                    actions += machine.channelCreated(record, now: clock.date)
                }
            case .recordChannel(let record):
                sink.record(record)
            case .deleteChannel(var record, _):
                channelsDeleted.append(record.channelId)
                record.deletedAt = clock.date
                record.writtenAt = clock.date
                sink.record(record)
                actions += machine.channelDeleted(record, now: clock.date)
            }
        }
    }

    /// Makes the channels held back, in order.
    func makeHeldChannels() {
        holdingChannels = false
        let held = heldChannels
        heldChannels.removeAll()
        for creation in held { step { _, _ in [.createChannel(creation)] } }
    }

    /// Persists the outcomes held back, in order; later ones are persisted at once.
    func persistHeld() {
        holdingPublishes = false
        let held = unpersisted
        unpersisted.removeAll()
        for (outcome, ticket, copies) in held {
            sink.record(outcome)
            done.append(ticket)
            done += copies
            step { $0.outcomePersisted(outcome.requestId, now: $1) }
        }
    }

    /// A channel record read from the topic (a partition assigned).
    func channelRecorded(_ record: BroadcastChannelRecord) {
        step { $0.channelRecorded(record, now: $1) }
    }
}

@Suite("The dispatch engine's policies, with a manual clock", .timeLimit(.minutes(1)))
struct EngineTests {
    @Test("priority 10 spends the activity's budget; past it, updates go at 5 and say so; it refills with time")
    func budget() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        for i in 1...15 {
            h.submit(h.request("a", sequence: Int64(i), supersedable: false))
            h.outcomes(i)
        }
        var outcomes = h.sink.all
        #expect(outcomes.prefix(12).allSatisfy { $0.result == .delivered && $0.priorityUsed == 10 })
        #expect(outcomes.suffix(3).allSatisfy { $0.result == .deliveredDowngraded && $0.priorityUsed == 5 })
        h.advance(300)  // 12 an hour: one more after 5 minutes
        h.submit(h.request("a", sequence: 16, supersedable: false))
        outcomes = h.outcomes(16)
        #expect(outcomes.last?.priorityUsed == 10)
        #expect(h.sender.sent.filter { $0.priority == 10 }.count == 13)
    }

    @Test("frequent updates get the larger budget, and lose it when the user switches them off")
    func frequentBudget() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1), frequent: true)
        for i in 1...20 {
            h.submit(h.request("a", sequence: Int64(i), supersedable: false))
            h.outcomes(i)
        }
        #expect(h.sink.all.allSatisfy { $0.priorityUsed == 10 })
        h.register("a", token: hexToken(1), frequent: false)
        h.submit(h.request("a", sequence: 21, supersedable: false))
        #expect(h.outcomes(21).last?.priorityUsed == 5)
    }

    @Test("an app can have budgets of its own")
    func appBudget() throws {
        var policy = DispatcherPolicy()
        policy.budgets.apps["com.example.food"] = (.init(capacity: 2, period: .seconds(3_600)), .init(capacity: 3, period: .seconds(3_600)))
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        for i in 1...3 {
            h.submit(h.request("a", sequence: Int64(i), supersedable: false))
            h.outcomes(i)
        }
        #expect(h.sink.all.map(\.priorityUsed) == [10, 10, 5])
    }

    @Test("a critical update waits for budget instead of being downgraded, within its bound")
    func criticalWaits() throws {
        var policy = DispatcherPolicy()
        policy.budgets.standard = .init(capacity: 1, period: .seconds(3_600))
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        h.submit(h.request("a", sequence: 1, supersedable: false))
        h.outcomes(1)
        h.submit(h.request("a", sequence: 2, urgency: .critical, supersedable: false))
        #expect(h.sink.all.count == 1, "the critical update waits")
        h.advance(121)  // past the 2-minute bound: it goes at 5
        let outcomes = h.outcomes(2)
        #expect(outcomes.last?.result == .deliveredDowngraded)
    }

    @Test("while one push is in flight, newer updates replace older waiting ones; the newest content is sent last; start and end are never dropped")
    func coalescing() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.hold()
        h.submit(h.request("a", .start, sequence: 0))
        for i in 1...4 { h.submit(h.request("a", sequence: Int64(i))) }
        let replaced = h.outcomes(3)
        #expect(replaced.allSatisfy { $0.result == .coalesced && $0.supersededBy != nil })
        h.release()
        let outcomes = h.outcomes(5)
        #expect(outcomes.filter { $0.result == .delivered }.count == 2)
        #expect(h.sender.sent.map { String(buffer: $0.payload).contains(#""event":"start""#) } == [true, false])
        #expect(String(buffer: h.sender.sent.last!.payload).contains(#""sequence":4"#))

        // An end cancels the updates still waiting, and is sent.
        h.hold()
        h.submit(h.request("a", sequence: 5))
        h.submit(h.request("a", sequence: 6))
        h.submit(h.request("a", .end, sequence: 7))
        h.release()
        let after = h.outcomes(8)
        #expect(after.suffix(3).map(\.result).sorted { $0.rawValue < $1.rawValue } == [.coalesced, .delivered, .delivered])
        #expect(String(buffer: h.sender.sent.last!.payload).contains(#""event":"end""#))
        // Nothing after the end.
        h.submit(h.request("a", sequence: 8))
        #expect(h.outcomes(9).last?.result == .expired)
    }

    @Test("an activity whose end was delivered stays ended, even once nothing else is waiting")
    func endIsRemembered() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1), frequent: true)
        h.submit(h.request("a", .end, sequence: 1, priority: 5))
        h.outcomes(1)
        h.submit(h.request("a", sequence: 2))
        let outcomes = h.outcomes(2)
        #expect(outcomes.map(\.result) == [.delivered, .expired])
        #expect(h.sender.sent.count == 1)
    }

    @Test("an older update arriving after a newer one waits is dropped, not sent after it")
    func staleUpdate() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.hold()
        h.submit(h.request("a", sequence: 1))
        h.submit(h.request("a", sequence: 5))
        h.submit(h.request("a", sequence: 3))
        h.release()
        let outcomes = h.outcomes(3)
        #expect(outcomes.filter { $0.result == .coalesced }.count == 1)
        #expect(String(buffer: h.sender.sent.last!.payload).contains(#""sequence":5"#))
    }

    @Test("5xx answers are retried with backoff, the same apns-id each time; the limit ends in failed")
    func retries() throws {
        var policy = DispatcherPolicy()
        policy.retry.maximumAttempts = 3
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        h.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable"), APNsAnswer(status: 500, reason: "InternalServerError")])
        let request = h.request("a", sequence: 1)
        h.submit(request)
        // Time moves on until the third attempt went out: the backoff delays are on the manual clock.
        h.until { h.sink.all.count == 1 }
        let outcome = h.sink.all.first
        #expect(outcome?.result == .delivered)
        #expect(outcome?.attempts == 3)
        #expect(h.sender.sent.count == 3)
        #expect(Set(h.sender.sent.map(\.apnsID)) == [request.requestId])

        h.sender.script(hexToken(1), Array(repeating: APNsAnswer(status: 503, reason: "ServiceUnavailable"), count: 3))
        h.submit(h.request("a", sequence: 2))
        h.until { h.sink.all.count == 2 }
        let failed = h.sink.all.last
        #expect(failed?.result == .failed)
        #expect(failed?.attempts == 3)
        #expect(failed?.apns?.status == 503)
    }

    @Test("a dead token is never sent to again; an invalidated token gets tokenInvalid once no newer record came within the recheck (3 s); unknown apps are rejected")
    func tokenGuards() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.sender.script(hexToken(1), [APNsAnswer(status: 410, reason: "Unregistered", timestamp: h.clock.date)])
        let sent = h.request("a", sequence: 1)
        h.submit(sent)
        h.submit(h.request("a", sequence: 2, supersedable: false))
        #expect(h.sink.final.count == 1, "the second waits for a newer record")
        h.advance(3)
        // Outcomes are published concurrently: find them by request, not by position.
        let outcomes = h.outcomes(2)
        #expect(outcomes.map(\.result) == [.tokenInvalid, .tokenInvalid])
        let answered = try #require(outcomes.first { $0.requestId == sent.requestId })
        #expect(answered.apns?.timestamp != nil)
        #expect(answered.tokenFingerprint == TokenFingerprint.of(token: hexToken(1)))
        #expect(h.sender.sent.count == 1)

        h.register("ended", token: hexToken(2), state: .invalidated)
        h.submit(h.request("ended", sequence: 1))
        h.advance(2.9)
        #expect(h.sink.final.count == 2)
        h.advance(0.1)
        #expect(h.outcomes(3).last?.result == .tokenInvalid)

        #expect(h.sender.sent.count == 1)
    }

    @Test("a token declared dead by APNs is alive again once the app registers it again (a later registration time): the next update is sent")
    func deadTokenRevived() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.sender.script(hexToken(1), [APNsAnswer(status: 410, reason: "Unregistered", timestamp: h.clock.date)])
        h.submit(h.request("a", sequence: 1))
        #expect(h.outcomes(1).map(\.result) == [.tokenInvalid])
        // Before the registry's invalidation reaches the table, the same record is still refused without asking APNs.
        h.submit(h.request("a", sequence: 2))
        h.advance(3)
        #expect(h.outcomes(2).map(\.result) == [.tokenInvalid, .tokenInvalid])
        #expect(h.sender.sent.count == 1)
        // The app reinstalled and registered the same token again (token-registry: reactivated).
        h.advance(60)
        h.register("a", token: hexToken(1))
        h.submit(h.request("a", sequence: 3))
        #expect(h.outcomes(3).last?.result == .delivered)
        #expect(h.sender.sent.count == 2, "sent to APNs again")
    }

    @Test("the app registers its token again after APNs's 410 and its backend's next content reaches the dispatcher before the new record does: it waits for the record and is sent (it ended tokenInvalid at once: the end-to-end reinstall failed now and then)")
    func reinstallRace() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.sender.script(hexToken(1), [APNsAnswer(status: 410, reason: "Unregistered", timestamp: h.clock.date)])
        h.submit(h.request("a", sequence: 1))
        #expect(h.outcomes(1).map(\.result) == [.tokenInvalid])
        h.advance(5)
        h.register("a", token: hexToken(1), state: .invalidated)  // token-registry acted on the 410
        h.advance(5)
        let next = h.request("a", sequence: 2)
        h.submit(next)
        h.advance(0.5)
        #expect(h.sink.final.count == 1, "waiting for a newer record")
        h.register("a", token: hexToken(1))  // reactivated, read by the table after the content
        #expect(h.outcomes(2).last?.requestId == next.requestId && h.outcomes(2).last?.result == .delivered)
        #expect(h.sender.sent.count == 2)
    }

    @Test("activities waiting for their token do not hold up the input of the others (not counted against the queue limit), and at most maximumAwaitingToken wait: past it, the one whose wait ends first gives up")
    func awaitingIsBounded() throws {
        var policy = DispatcherPolicy()
        policy.maximumQueued = 2
        policy.maximumAwaitingToken = 3
        let h = EngineHarness(policy: policy)
        // Five tokenless activities, more than the queue limit: every submit returns (none blocks the input).
        var waiting: [PushRequest] = []
        for index in 0..<5 {
            let request = h.request("tokenless-\(index)", sequence: 1)
            waiting.append(request)
            h.submit(request)
            #expect(h.machine.hasRoom, "a request waiting for its token does not count against the queue limit")
            h.advance(1)
        }
        // Three may wait: the two whose waits end first gave up.
        let gaveUp = h.outcomes(2)
        #expect(Set(gaveUp.map(\.requestId)) == Set(waiting.prefix(2).map(\.requestId)))
        #expect(gaveUp.allSatisfy { $0.result == .awaitingToken })
        // An activity with a token still goes at once.
        h.register("ready", token: hexToken(5))
        h.submit(h.request("ready", sequence: 1))
        #expect(h.outcomes(3).last?.result == .delivered)
        // A token arriving for one that waits sends it, without polling.
        h.register("tokenless-4", token: hexToken(6))
        #expect(h.outcomes(4).last?.requestId == waiting[4].requestId)
    }

    @Test("requests waiting for their token are bounded in number too (maximumAwaitingRequests), not only activities: alerting updates, which are never coalesced, past the limit give up (issue 57)")
    func awaitingRequestsAreBounded() throws {
        var policy = DispatcherPolicy()
        policy.maximumQueued = 2
        policy.maximumAwaitingRequests = 4
        let h = EngineHarness(policy: policy)
        // One tokenless activity, ten alerting updates: each would be 4 KB held for 2 minutes.
        var sent: [PushRequest] = []
        for sequence in 1...10 {
            let request = h.request("tokenless", sequence: Int64(sequence), supersedable: false, alerting: true)
            sent.append(request)
            h.submit(request)
            #expect(h.machine.queued <= policy.maximumQueued + policy.maximumAwaitingRequests, "held: \(h.machine.queued)")
        }
        // Past the limit the activity whose wait ends first gives up what it has waiting.
        let gaveUp = h.outcomes(5)
        #expect(gaveUp.allSatisfy { $0.result == .awaitingToken }, "\(gaveUp.map(\.result.rawValue)) \(gaveUp.map(\.detail))")
        #expect(h.machine.queued <= policy.maximumAwaitingRequests)
        // The token arrives: what still waits goes, nothing given up is sent.
        let waiting = sent.count - gaveUp.count
        h.register("tokenless", token: hexToken(7))
        let all = h.outcomes(10)
        #expect(all.count == 10 && Set(all.map(\.requestId)) == Set(sent.map(\.requestId)), "one outcome each")
        #expect(h.sender.sent.count == waiting)
    }

    @Test("no token yet: the request waits, newer content replaces it, and the latest is sent once the token arrives; still none at the end of the wait: awaitingToken, never tokenInvalid")
    func awaitingToken() throws {
        let h = EngineHarness()
        let start = h.clock.date
        let first = h.request("late", sequence: 1)
        h.submit(first)
        h.until(step: 1) { h.clock.date >= start.addingTimeInterval(20) }
        #expect(h.sink.final.isEmpty, "waiting, not given up: \(h.sink.final.map(\.result.rawValue))")
        let second = h.request("late", sequence: 2)
        h.submit(second)
        let coalesced = h.outcomes(1)
        #expect(coalesced.map(\.requestId) == [first.requestId] && coalesced.map(\.result) == [.coalesced])
        // The app registers the token 20 s after the backend's first event: the latest content goes.
        h.register("late", token: hexToken(3))
        h.outcomes(2)  // no clock movement needed: the token's arrival wakes it
        #expect(h.sink.final.last?.requestId == second.requestId && h.sink.final.last?.result == .delivered)

        // No token ever: ended as awaitingToken at the end of the wait (2 minutes), nothing sent.
        let never = h.request("never", sequence: 1)
        h.submit(never)
        h.until(step: 5) { h.sink.final.count == 3 }
        #expect(h.sink.final.last?.requestId == never.requestId && h.sink.final.last?.result == .awaitingToken)
        #expect(h.clock.date >= start.addingTimeInterval(20 + 120), "not before the wait is over")
        #expect(h.sender.sent.count == 1)
    }

    @Test("updates to an activity older than 8 hours are not sent; its end still is")
    func lifetime() throws {
        let h = EngineHarness()
        h.register("old", token: hexToken(1), startedAt: h.clock.date.addingTimeInterval(-8 * 3_600 - 1))
        let update = h.request("old", sequence: 1)
        let end = h.request("old", .end, sequence: 2)
        h.submit(update)
        h.submit(end)
        let outcomes = h.outcomes(2)
        #expect(outcomes.first { $0.requestId == update.requestId }?.result == .expired)
        #expect(outcomes.first { $0.requestId == end.requestId }?.result == .delivered)
    }

    @Test("403 ExpiredProviderToken renews the token and retries once; other 403s hold the team's pushes until the cooldown ends, not reject them")
    func providerTokenAnswers() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.sender.script(hexToken(1), [APNsAnswer(status: 403, reason: "ExpiredProviderToken")])
        h.submit(h.request("a", sequence: 1))
        #expect(h.outcomes(1).first?.result == .delivered)
        #expect(h.sender.renewals == 1)

        h.sender.script(hexToken(1), [APNsAnswer(status: 403, reason: "InvalidProviderToken")])
        let reopening = h.clock.date.addingTimeInterval(60)
        h.submit(h.request("a", sequence: 2, supersedable: false))
        h.submit(h.request("a", sequence: 3, supersedable: false))
        // The clock moves only once the refusal was handled (the lane waits for its reopening):
        // moved earlier, the cooldown would start later than the test counts (seen in CI).
        #expect(h.isScheduled(reopening), "the lane waits for its reopening")
        h.advance(59)
        #expect(h.sink.final.count == 1, "held, not rejected: \(h.sink.final.map(\.result.rawValue))")
        #expect(h.sender.sent.count == 3, "no hot loop: the lane stopped after the first refusal")
        h.advance(2)
        let outcomes = h.outcomes(3)
        #expect(outcomes.suffix(2).map(\.result) == [.delivered, .delivered])
        #expect(outcomes.suffix(2).map(\.attempts) == [2, 1], "the refused one was sent again")
        #expect(h.sender.sent.count == 5)
    }

    @Test("a start and an end held by a 403 are both delivered after the cooldown; one probe while the lane is stopped; the team's other activities wait for its answer; other teams are unaffected")
    func stoppedLaneProbe() throws {
        let h = EngineHarness(teams: ["com.example.food": "TEAM123456", "com.example.taxi": "TEAM654321"])
        for (activity, seed) in [("a", 1), ("b", 2), ("c", 3)] { h.register(activity, token: hexToken(seed)) }
        h.register("taxi", token: hexToken(4), bundleId: "com.example.taxi")
        h.sender.script(hexToken(1), [APNsAnswer(status: 403, reason: "InvalidProviderToken")])
        let start = h.request("a", .start, sequence: 0)
        let reopening = h.clock.date.addingTimeInterval(60)
        h.submit(start)
        #expect(h.isScheduled(reopening), "the lane waits for its reopening")
        let end = h.request("a", .end, sequence: 1)
        let others = [h.request("b", sequence: 1), h.request("c", sequence: 1)]
        h.submit(end)
        for request in others { h.submit(request) }
        let taxi = h.request("taxi", sequence: 1, bundleId: "com.example.taxi")
        h.submit(taxi)
        let first = h.outcomes(1)
        #expect(first.map(\.requestId) == [taxi.requestId], "another team's lane is open")
        #expect(first.first?.result == .delivered)
        h.advance(30)
        #expect(h.sender.sent.count == 2, "nothing of the team is sent during the cooldown")

        // The cooldown ends: one request probes; the rest wait for its answer, however long it takes.
        h.hold()
        h.advance(31)
        h.until(step: 0) { h.sender.sent.count == 3 }
        h.advance(60)
        #expect(h.sender.sent.count == 3, "one probe: \(h.sender.sent.count - 2) sent")
        #expect(h.sink.final.count == 1)
        h.release()

        let outcomes = h.outcomes(5)
        #expect(outcomes.allSatisfy { $0.result == .delivered }, "\(outcomes.map(\.result.rawValue))")
        #expect(Set(outcomes.map(\.requestId)) == Set(([start, end, taxi] + others).map(\.requestId)))
        #expect(h.sender.sent.filter { $0.deviceToken == hexToken(1) }.map(\.apnsID) == [start.requestId, start.requestId, end.requestId])
        #expect(h.sender.sent.count == 6)
    }

    @Test("a request read again (its partition lost in a broker stall and assigned back) is sent once: a copy behind the one in flight and a copy after its outcome are released without a send")
    func copiesReadAgain() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let request = h.request("a", sequence: 1, supersedable: false)
        h.hold()
        h.submit(request)
        h.until(step: 0) { h.sender.sent.count == 1 }
        h.submit(request)  // read again while the first copy is in flight
        h.release()
        let outcomes = h.outcomes(1)
        h.until(step: 0) { h.done.count == 2 }
        h.submit(request)  // read again after its outcome
        h.until(step: 0) { h.done.count == 3 }
        #expect(h.sender.sent.count == 1)
        #expect(h.sink.final.count == 1)
        #expect(outcomes.first?.result == .delivered)
    }

    @Test("a copy of a request read again while the request waits or is in flight joins it: newer content does not coalesce the copy while the request is delivered (two outcomes, seen in a broker stall), a copy does not coalesce its own request, a revocation drops both")
    func copiesJoinTheirRequest() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let first = h.request("a", sequence: 1)
        let newer = h.request("a", sequence: 2)
        h.hold()
        h.submit(first)  // ticket 1, in flight
        h.until(step: 0) { h.sender.sent.count == 1 }
        h.submit(first)  // ticket 2: read again while in flight
        h.submit(newer)  // ticket 3: waits behind the one in flight
        h.submit(newer)  // ticket 4: read again while it waits
        #expect(h.sink.final.isEmpty, "\(h.sink.final.map(\.result.rawValue))")
        #expect(h.done.isEmpty, "a copy is done only when its request's outcome is persisted")
        h.release()
        h.until(step: 0) { h.sink.final.count == 2 }
        #expect(h.sink.final.map(\.requestId) == [first.requestId, newer.requestId])
        #expect(h.sink.final.allSatisfy { $0.result == .delivered }, "\(h.sink.final.map(\.result.rawValue))")
        #expect(h.sender.sent.map(\.apnsID) == [first.requestId, newer.requestId])
        #expect(h.done == [1, 2, 3, 4])

        // Revoked while it waits: the request and its copy are dropped together, for the next owner.
        let waiting = h.request("a", sequence: 4)
        h.hold()
        let blocking = h.request("a", sequence: 3, supersedable: false)
        h.submit(blocking)  // ticket 5, in flight
        h.submit(waiting)  // ticket 6
        h.submit(waiting)  // ticket 7
        #expect(h.dropWaiting { $0 == 6 }.sorted() == [6, 7])
        h.release()
        h.until(step: 0) { h.sink.final.count == 3 }
        #expect(h.sender.sent.map(\.apnsID) == [first.requestId, newer.requestId, blocking.requestId])
        #expect(h.done == [1, 2, 3, 4, 5])
    }

    @Test("a copy read while its request's outcome waits to be persisted (Kafka stalled) is done only once the outcome is: its offset is never committed before the outcome is on the topic")
    func copyWaitsForThePersistedOutcome() throws {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let request = h.request("a", sequence: 1)
        h.holdingPublishes = true
        h.submit(request)  // ticket 1: sent, answered; its outcome not yet persisted
        #expect(h.sender.sent.count == 1 && h.done.isEmpty)
        h.submit(request)  // ticket 2: read again meanwhile
        #expect(h.done.isEmpty, "not done before the outcome is persisted")
        h.persistHeld()
        #expect(h.done == [1, 2])
        h.submit(request)  // ticket 3: read again after
        #expect(h.done == [1, 2, 3])
        #expect(h.sender.sent.count == 1 && h.sink.final.count == 1)
    }

    @Test("a held request keeps its bounds: expired at its apns-expiration, failed at the retry deadline; a refused probe starts the cooldown again")
    func stoppedLaneBounds() throws {
        var policy = DispatcherPolicy()
        policy.retry.maximumDuration = .seconds(150)
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        h.register("b", token: hexToken(2))
        h.sender.script(hexToken(1), Array(repeating: APNsAnswer(status: 403, reason: "InvalidProviderToken"), count: 5))
        let refused = h.request("a", sequence: 1)
        h.submit(refused)
        h.until(step: 0) { h.sender.sent.count == 1 }
        var expiring = h.request("b", sequence: 1)
        expiring.expiration = h.clock.date.addingTimeInterval(30)
        h.submit(expiring)
        h.until(step: 1) { h.sink.final.count == 2 }
        let outcomes = h.sink.final
        let failed = try #require(outcomes.first { $0.requestId == refused.requestId })
        #expect(failed.result == .failed)
        #expect(failed.detail?.contains("refused team TEAM123456's credentials (InvalidProviderToken)") == true, "\(failed.detail ?? "")")
        #expect(failed.attempts == 3)
        #expect(outcomes.first { $0.requestId == expiring.requestId }?.result == .expired)
        #expect(h.sender.sent.map(\.recipient) == Array(repeating: hexToken(1), count: 3), "the first send, then a probe at 60 s and at 120 s")
    }

    @Test("what the engine remembers does not grow with every activity ever seen: spent budgets once refilled, ended activities after 12 hours")
    func forgetsIdleActivities() throws {
        let h = EngineHarness()
        h.register("quiet", token: hexToken(1))
        h.register("ended", token: hexToken(2))
        h.register("busy", token: hexToken(3))
        let now = h.clock.date
        h.tokens.put(
            TokenRecord(
                kind: .pushToStart, deviceId: "phone", userId: "u", token: hexToken(4), app: AppTarget(bundleId: "com.example.food", environment: .production),
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now),
            key: MessageKey.pushToStart(bundleId: "com.example.food", deviceId: "phone", attributesType: "DeliveryAttributes"))
        let start = PushRequest(
            requestId: UUID().uuidString.lowercased(), pushToStartKey: MessageKey.pushToStart(bundleId: "com.example.food", deviceId: "phone", attributesType: "DeliveryAttributes"), event: .start,
            app: AppTarget(bundleId: "com.example.food", environment: .production), attributesType: "DeliveryAttributes",
            payload: payload(event: "start"), priority: 10, urgency: .routine, supersedable: false, alerting: false, apnsTimestamp: 1_795_000_000,
            contentSequence: 0, createdAt: now)
        h.submit(h.request("quiet", sequence: 1))
        h.submit(h.request("ended", .end, sequence: 1))
        h.submit(start)
        h.outcomes(3)
        var remembered = h.machine.remembered
        #expect(remembered == (2, 1), "\(remembered): spent budgets are remembered: quiet's, the ended activity's, the phone's push-to-start")

        // An hour later quiet's budget is full again: it says nothing a fresh slot would not. It
        // is forgotten when the next outcome is finished, although that is another activity's.
        h.advance(3_601)
        h.submit(h.request("busy", sequence: 1))
        h.outcomes(4)
        remembered = h.machine.remembered
        #expect(remembered == (2, 0), "\(remembered): quiet and the phone forgotten; ended and busy (budget just spent) remembered")

        h.advance(12 * 3_600 + 1)
        h.register("later", token: hexToken(5))
        h.submit(h.request("later", sequence: 1))
        h.outcomes(5)
        remembered = h.machine.remembered
        #expect(remembered == (1, 0), "\(remembered): the end is forgotten 12 hours on, busy once its budget refilled; later (budget just spent) remembered")
        h.submit(h.request("ended", sequence: 2))
        #expect(h.outcomes(6).last?.result == .expired, "a late update to it is still not sent: the activity is past its lifetime")
    }

    @Test("a critical update that leaves while it waits for budget (its partition revoked) leaves nothing behind once the budget refilled")
    func waitingBudgetForgotten() {
        var policy = DispatcherPolicy()
        policy.budgets.standard = .init(capacity: 1, period: .seconds(3_600))
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        h.submit(h.request("a", sequence: 1, supersedable: false))  // spends the budget
        h.submit(h.request("a", sequence: 2, urgency: .critical, supersedable: false))  // waits for it
        #expect(h.sender.sent.count == 1)
        #expect(h.dropWaiting { _ in true }.count == 1)
        h.advance(3_601)  // a's budget is full again
        h.register("b", token: hexToken(2))
        h.submit(h.request("b", sequence: 1))  // an outcome: the sweep runs
        #expect(h.machine.remembered.activities == 1, "only b, whose budget was just spent: \(h.machine.remembered)")
    }

    @Test("a graceful stop finishes what is in flight and starts nothing more: queued updates and retries are left to the next owner")
    func drainStartsNothing() throws {
        // Found by the end-to-end graceful-stop suite: the engine kept sending while the service
        // committed and left the group; the sends the shutdown then cut off got no outcome, and the
        // next owner sent them again.
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.register("b", token: hexToken(2))
        h.sender.script(hexToken(2), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        h.submit(h.request("b", sequence: 1))
        h.until { h.sender.sent.count == 1 }  // b's first attempt was answered 503: a retry waits for its backoff
        h.hold()
        h.submit(h.request("a", sequence: 1, supersedable: false))
        h.submit(h.request("a", sequence: 2, supersedable: false))  // waits behind the one in flight
        h.until { h.sender.sent.count == 2 }
        h.beginDrain()
        #expect(!h.machine.isDrained, "a push is in flight")
        h.release()
        #expect(h.machine.isDrained, "drained once the push in flight has its outcome persisted")
        #expect(h.sink.final.count == 1, "the push in flight got its outcome before the drain ended")
        #expect(h.done.count == 1, "and its input was released")
        // Time passes while the service commits and leaves its group: nothing more is sent.
        for _ in 0..<20 { h.advance(30) }
        #expect(h.sender.sent.count == 2, "sent after the drain: \(h.sender.sent.count - 2)")
        #expect(h.sink.final.count == 1, "requests not sent have no outcome: the next owner reads them again")
        // A request read after the drain began is not taken (the driver answers its submitter
        // `false`: see DispatchEngineDriverTests).
        #expect(!h.machine.isAccepting)
    }

    @Test("a resend after an ambiguous failure carries no alert, so the phone does not alert twice")
    func ambiguousResend() {
        let text = payload(alert: true)
        let stripped = DispatchEngine.withoutAlert(text)
        #expect(text.contains("alert"))
        #expect(!stripped.contains("alert"))
        #expect(!stripped.contains("sound"))
        #expect(stripped.contains("content-state"))
        #expect(stripped.contains("1795000000"))
    }

    @Test("for random request sequences (with 503s and a 403 on the way): one outcome each, priority-10 sends within the budget, content never goes back, start and end always sent", arguments: 1...12)
    func randomSequences(seed: UInt64) throws {
        var random = SplitMix(seed: seed)
        var policy = DispatcherPolicy()
        policy.budgets.standard = .init(capacity: 4, period: .seconds(600))
        let h = EngineHarness(policy: policy)
        h.register("a", token: hexToken(1))
        let started = h.clock.date
        var requests = [h.request("a", .start, sequence: 0)]
        for sequence in 1...Int64(random.next() % 30 + 5) {
            requests.append(h.request("a", sequence: sequence, priority: random.next() % 3 == 0 ? 5 : 10, urgency: random.next() % 5 == 0 ? .critical : .routine))
        }
        requests.append(h.request("a", .end, sequence: Int64(requests.count)))
        if random.next() % 2 == 0 { h.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable")]) }
        if random.next() % 3 == 0 { h.sender.script(hexToken(1), [APNsAnswer(status: 403, reason: "InvalidProviderToken")]) }
        for request in requests {
            if random.next() % 3 == 0 { h.hold() }
            h.submit(request)
            h.advance(Double(random.next() % 5))
            if random.next() % 2 == 0 { h.release() }
        }
        h.release()
        h.until(step: 5) { h.sink.all.count == requests.count }
        let outcomes = h.sink.all
        #expect(Dictionary(grouping: outcomes, by: \.requestId).count == requests.count, "one outcome per request")
        #expect(Dictionary(grouping: outcomes, by: \.requestId).values.allSatisfy { $0.count == 1 })
        let byID = Dictionary(uniqueKeysWithValues: outcomes.map { ($0.requestId, $0) })
        // Sent, at 10 or (the budget spent) at 5: answers come at once here, so more updates go
        // out (fewer are coalesced) and the end may find the budget empty.
        let sent: Set<PushResult> = [.delivered, .deliveredDowngraded]
        #expect(byID[requests.first!.requestId].map { sent.contains($0.result) } == true, "start sent")
        #expect(byID[requests.last!.requestId].map { sent.contains($0.result) } == true, "end sent")
        let elapsed = h.clock.date.timeIntervalSince(started)
        let highPriority = h.sender.sent.filter { $0.priority == 10 }
        #expect(Double(Set(highPriority.map(\.apnsID)).count) <= 4 + elapsed * 4 / 600 + 1, "priority-10 sends within the budget")
        let sentSequences = h.sender.sent.compactMap { push in requests.first { $0.requestId == push.apnsID }?.contentSequence }
        #expect(sentSequences == sentSequences.sorted(), "content never goes back")
    }
}

