import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import APNsDispatcher

/// The dispatch engine under a steady load, on a manual clock: many activities, each sent one
/// priority-10 update a second, while APNs answers each push only after a simulated latency of 1,
/// 2 or 3 seconds and only three quarters of the activities may have a push in flight at once (so
/// the next updates wait, and the newest replaces the older ones). One activity in ten has
/// frequent updates (240 an hour), the others the standard budget (12 an hour).
///
/// Size: `ISLET_BUDGET_LOAD_ACTIVITIES` × `ISLET_BUDGET_LOAD_SECONDS` simulated seconds, by default
/// 100 × 3,700 (370,000 requests, about 25 to 45 s in a debug build on a shared 2-core machine):
/// longer than a budget's refill period, so the sliding-hour figures cover a whole hour after the
/// initial burst. The issue's full size, 1,000 × 3,600 (3.6 million requests), takes minutes in a
/// debug build: `docs/apns-dispatcher.md#testing` has the figures and the command.
///
/// Checked: every request gets exactly one outcome, and its ticket is reported done; what was sent
/// is exactly what was reported delivered (priority 10) or deliveredDowngraded (priority 5), and
/// content never goes back; each activity's priority-10 sends stay within its token bucket —
/// between any two of them, at most `capacity + refill × elapsed` (so up to twice the capacity in
/// a sliding hour) — and are downgraded to 5 only when the bucket is empty (an activity is sent to
/// again within seconds, faster than its bucket refills, so the bucket never overflows and holds
/// exactly `capacity + refill × elapsed − sends at 10` since its first send); the last content of
/// every activity is sent. The coalescing ratio and the priority-10 share are printed; which
/// activity gets a free send slot first depends on the order the answers are processed in, so the
/// figures vary a little from run to run, the checks do not.
@Suite("The dispatch engine under load: budgets, coalescing, the last content", .timeLimit(.minutes(20)))
struct BudgetLoadTests {
    @Test("an update a second to every activity for more than a simulated hour")
    func updateEverySecond() async throws {
        let environment = ProcessInfo.processInfo.environment
        let activities = try #require(Int(environment["ISLET_BUDGET_LOAD_ACTIVITIES"] ?? "100"), "ISLET_BUDGET_LOAD_ACTIVITIES")
        let seconds = try #require(Int(environment["ISLET_BUDGET_LOAD_SECONDS"] ?? "3700"), "ISLET_BUDGET_LOAD_SECONDS")
        try #require(activities > 0 && seconds > 0)

        var policy = DispatcherPolicy()
        // Fewer send slots than activities: some wait for one (the engine's ready list) under load.
        policy.maximumInFlight = max(1, activities * 3 / 4)
        // A fixed number of send slots: this run holds answers back on purpose (SendWindowTests
        // checks how the window adapts to slow answers).
        policy.initialInFlight = policy.maximumInFlight
        policy.slowAnswer = .seconds(86_400)
        let load = LoadPlan(activities: activities, seconds: seconds, maximumInFlight: policy.maximumInFlight)
        let clock = ManualClock()
        let ledger = LoadLedger(plan: load, clock: clock)
        let tokens = PartitionTokens.forTests()
        let doneCount = AwaitedLog<Void>()
        let engine = DispatchEngine(
            sender: ledger, tokens: tokens, outcomes: ledger, policy: policy, teams: [LoadPlan.bundleId: "TEAM123456"], clock: clock,
            random: { 0.5 }, logger: quietLogger, onDone: { _ in doneCount.append(()) })
        let runner = Task { await engine.run() }

        let start = clock.date
        for activity in 0..<activities {
            let record = load.tokenRecord(activity, now: start)
            tokens.put(record, key: record.key!)
        }

        let began = ContinuousClock.now
        var ticket: UInt64 = 0
        for second in 0..<seconds {
            for activity in 0..<activities {
                ledger.submitting(activity)
                ticket += 1
                await engine.submit(load.request(activity, sequence: Int64(second), at: clock.date), ticket: ticket)
            }
            // The sends these made must reach APNs before the clock moves (they are timed by it);
            // then the answers due by the next second arrive, and the sends they let go.
            guard await ledger.quiescent() else {
                Issue.record("the engine got stuck at second \(second): \(ledger.busyActivities) activities wait, not all for APNs")
                break
            }
            clock.advance(1)
            ledger.answerDue()
            guard await ledger.quiescent() else {
                Issue.record("the engine got stuck at second \(second + 1): \(ledger.busyActivities) activities wait, not all for APNs")
                break
            }
        }
        // No more input: answers keep arriving until every activity's last content is sent.
        var extra = 0
        while ledger.busyActivities > 0 && extra < 60 {
            clock.advance(1)
            ledger.answerDue()
            guard await ledger.quiescent() else { break }
            extra += 1
        }
        let submitted = activities * seconds
        // Outcomes are published by the engine's publishers: wait for the last ones (at most 10 s).
        _ = try? await withTimeout(.seconds(10), "the last outcomes") {
            await ledger.published.wait(for: submitted)
            await doneCount.wait(for: submitted)
        }
        let took = ContinuousClock.now - began
        let report = ledger.report()
        let ticketsDone = doneCount.count

        // An hour later every budget is full again: the engine forgets the activities once an
        // outcome is finished (here of one more update, to activity 0, which it then remembers).
        clock.advance(3_601)
        ledger.submitting(0)
        await engine.submit(load.request(0, sequence: Int64(seconds), at: clock.date), ticket: ticket + 1)
        _ = await ledger.quiescent()
        clock.advance(1)
        ledger.answerDue()
        _ = await ledger.quiescent()
        _ = try? await withTimeout(.seconds(10), "the last outcome") { await ledger.published.wait(for: submitted + 1) }
        let remembered = engine.remembered.activities

        ledger.answerDue(by: .distantFuture)  // none is left unless the engine got stuck: a send must not outlive the test
        engine.finish()
        await runner.value

        #expect(ledger.busyActivities == 0, "every activity's queue ran empty within a minute of the last update")
        #expect(report.outcomes == submitted, "one outcome per request")
        #expect(report.duplicateOutcomes == 0, "no request has two outcomes")
        #expect(report.missingOutcomes == 0, "no request is without an outcome")
        #expect(ticketsDone == submitted, "every ticket reported done")
        #expect(report.otherOutcomes == 0, "only delivered, deliveredDowngraded and coalesced under a healthy APNs")
        #expect(report.mismatches == 0, "sent at 10 ⇔ delivered, sent at 5 ⇔ deliveredDowngraded, not sent ⇔ coalesced")
        #expect(report.sentTwice == 0, "no request is sent twice")
        #expect(report.wentBack == 0, "content never goes back")
        #expect(report.overBudget.isEmpty, "priority-10 sends within capacity + refill × elapsed: \(report.overBudget.prefix(5))")
        #expect(report.unusedBudget.isEmpty, "downgraded only when the bucket was empty: \(report.unusedBudget.prefix(5))")
        #expect(report.lastContentMissing.isEmpty, "the last content of every activity is sent: \(report.lastContentMissing.prefix(5))")
        #expect(report.coalesced > 0, "the load makes updates wait and coalesce")
        #expect(remembered == 1, "idle activities whose budget refilled are forgotten, not kept for ever")

        let ratio = Double(report.coalesced) / Double(submitted)
        let p10Share = Double(report.sentAt10) / Double(max(1, report.sent))
        print(
            """
            budget load: \(activities) activities × \(seconds) s = \(submitted) updates in \(took) (+\(extra) s of simulated drain); \
            sent \(report.sent) (\(report.sentAt10) at priority 10, \(report.sent - report.sentAt10) downgraded to 5), coalesced \(report.coalesced); \
            coalescing ratio \(String(format: "%.3f", ratio)), priority-10 share of sends \(String(format: "%.3f", p10Share)); \
            most priority-10 sends in a sliding hour: standard \(report.maximumHourly.standard), frequent \(report.maximumHourly.frequent)
            """)
    }
}

/// Who is who in the load: activity `i` has frequent updates when `i % 10 == 0`, and APNs answers
/// its pushes `1 + i % 3` seconds after they were sent.
struct LoadPlan: Sendable {
    static let bundleId = "com.example.food"
    let activities: Int
    let seconds: Int
    let maximumInFlight: Int
    let budgets = BudgetPolicy()

    static func activityId(_ activity: Int) -> String { "load-\(activity)" }
    func isFrequent(_ activity: Int) -> Bool { activity % 10 == 0 }
    func latency(_ activity: Int) -> TimeInterval { TimeInterval(1 + activity % 3) }
    func limits(_ activity: Int) -> BudgetPolicy.Limits { budgets.limits(bundleId: Self.bundleId, frequentUpdates: isFrequent(activity)) }

    /// The request id names the activity and the content sequence, so that sends and outcomes can
    /// be counted without a table of ids.
    static func requestId(_ activity: Int, _ sequence: Int64) -> String { "\(activity)-\(sequence)" }
    static func parse(_ requestId: String) -> (activity: Int, sequence: Int) {
        let parts = requestId.split(separator: "-")
        return (Int(parts[0])!, Int(parts[1])!)
    }

    func tokenRecord(_ activity: Int, now: Date) -> TokenRecord {
        TokenRecord(
            kind: .update, activityId: Self.activityId(activity), userId: "u\(activity)", token: String(format: "%064x", activity),
            app: AppTarget(bundleId: Self.bundleId, environment: .production), attributesType: "DeliveryAttributes",
            frequentUpdatesEnabled: isFrequent(activity), appVersion: "1.0", state: .active, activityStartedAt: now, registeredAt: now, updatedAt: now)
    }

    func request(_ activity: Int, sequence: Int64, at now: Date) -> PushRequest {
        PushRequest(
            requestId: Self.requestId(activity, sequence), activityId: Self.activityId(activity), event: .update,
            app: AppTarget(bundleId: Self.bundleId, environment: .production), attributesType: "DeliveryAttributes",
            payload: #"{"aps":{"event":"update","timestamp":\#(1_795_000_000 + sequence),"content-state":{"sequence":\#(sequence)}}}"#,
            priority: 10, urgency: .routine, supersedable: true, alerting: false, apnsTimestamp: 1_795_000_000 + sequence,
            contentSequence: sequence, createdAt: now)
    }
}

/// APNs and the outcome topic of the load test in one ledger (one lock, so that "the engine has
/// nothing left to do at this instant" can be decided exactly): pushes are answered 200 once the
/// manual clock passed their latency; per request it keeps what was sent and what the outcome said.
final class LoadLedger: APNsSending, OutcomeSink {
    /// Per request (activity, sequence): bits of what happened to it. The ledger has room for one
    /// sequence more than the load, for the update an hour after it.
    private enum Mark {
        static let sentAt10: UInt8 = 1
        static let sentAt5: UInt8 = 2
        static let sentTwice: UInt8 = 4
        static let delivered: UInt8 = 8
        static let downgraded: UInt8 = 16
        static let coalesced: UInt8 = 32
        static let other: UInt8 = 64
        static let twoOutcomes: UInt8 = 128
    }

    private struct State {
        var marks: [[UInt8]]
        /// Requests submitted to an activity without an outcome yet.
        var open: [Int]
        /// Activities with such requests.
        var busy = 0
        var outcomes = 0
        var lastSent: [Int]
        var wentBack = 0
        /// Seconds since the start at which each activity's priority-10 pushes were sent.
        var highPriorityTimes: [[Double]]
        /// Downgrades while the activity's bucket (closed form, full at its first send) still held a send.
        var wasted: [String] = []
        /// Pushes waiting for their answer: when it is due, and who waits for it.
        var unanswered: [(due: Date, continuation: CheckedContinuation<Void, Never>)] = []
        var quietWaiter: (round: Int, continuation: CheckedContinuation<Bool, Never>)?
        var round = 0
    }

    private let plan: LoadPlan
    private let clock: ManualClock
    private let start: Date
    private let state: Mutex<State>

    init(plan: LoadPlan, clock: ManualClock) {
        self.plan = plan
        self.clock = clock
        start = clock.date
        state = Mutex(
            State(
                marks: Array(repeating: Array(repeating: 0, count: plan.seconds + 1), count: plan.activities), open: Array(repeating: 0, count: plan.activities),
                lastSent: Array(repeating: -1, count: plan.activities), highPriorityTimes: Array(repeating: [], count: plan.activities)))
    }

    var busyActivities: Int { state.withLock { $0.busy } }
    var outcomeCount: Int { state.withLock { $0.outcomes } }
    /// One entry per outcome published (to await them).
    let published = AwaitedLog<Void>()

    /// The test is about to submit a request to `activity`.
    func submitting(_ activity: Int) {
        state.withLock { state in
            if state.open[activity] == 0 { state.busy += 1 }
            state.open[activity] += 1
        }
    }

    func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer {
        let (activity, sequence) = LoadPlan.parse(push.apnsID)
        let now = clock.date
        await withCheckedContinuation { continuation in
            let quiet = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                let mark = push.priority == 10 ? Mark.sentAt10 : Mark.sentAt5
                if state.marks[activity][sequence] & (Mark.sentAt10 | Mark.sentAt5) != 0 { state.marks[activity][sequence] |= Mark.sentTwice }
                state.marks[activity][sequence] |= mark
                if sequence < state.lastSent[activity] { state.wentBack += 1 }
                state.lastSent[activity] = sequence
                let time = now.timeIntervalSince(start)
                if push.priority == 10 {
                    state.highPriorityTimes[activity].append(time)
                } else if let first = state.highPriorityTimes[activity].first {
                    let limits = plan.limits(activity)
                    let capacity = Double(limits.capacity)
                    let available = capacity + (time - first) * capacity / (limits.period / .seconds(1)) - Double(state.highPriorityTimes[activity].count)
                    if available >= 1 + 1e-6 { state.wasted.append("\(LoadPlan.activityId(activity)) at \(time) s with \(available) in its bucket") }
                } else {
                    state.wasted.append("\(LoadPlan.activityId(activity)) at \(time) s: its first send")
                }
                state.unanswered.append((now.addingTimeInterval(plan.latency(activity)), continuation))
                return Self.takeQuietWaiter(&state, maximumInFlight: plan.maximumInFlight)
            }
            quiet?.resume(returning: true)
        }
        return APNsAnswer(status: 200, apnsID: push.apnsID)
    }

    func renewProviderToken(teamID: String) {}
    func reconnect(teamID: String) {}

    // The load has no broadcasts: APNs answers as for an app without the capability.
    func createChannel(bundleID: String, storagePolicy: APNsStoragePolicy, teamID: String, environment: APNsEnvironment) async throws -> String {
        throw APNsChannelError(status: 400, reason: "FeatureNotEnabled")
    }

    func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws {
        throw APNsChannelError(status: 400, reason: "FeatureNotEnabled")
    }

    func record(_ channel: BroadcastChannelRecord) async throws {}

    func publish(_ outcome: PushOutcome) async throws {
        let (activity, sequence) = LoadPlan.parse(outcome.requestId)
        let quiet = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            let mark: UInt8 =
                switch outcome.result {
                case .delivered: Mark.delivered
                case .deliveredDowngraded: Mark.downgraded
                case .coalesced: Mark.coalesced
                default: Mark.other
                }
            if state.marks[activity][sequence] & (Mark.delivered | Mark.downgraded | Mark.coalesced | Mark.other) != 0 {
                state.marks[activity][sequence] |= Mark.twoOutcomes
            }
            state.marks[activity][sequence] |= mark
            state.outcomes += 1
            state.open[activity] -= 1
            if state.open[activity] == 0 { state.busy -= 1 }
            return Self.takeQuietWaiter(&state, maximumInFlight: plan.maximumInFlight)
        }
        quiet?.resume(returning: true)
        published.append(())
    }

    /// Answers the pushes whose latency has passed on the manual clock (all of them: `.distantFuture`).
    func answerDue(by now: Date? = nil) {
        let now = now ?? clock.date
        let due = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            let due = state.unanswered.filter { $0.due <= now }.map(\.continuation)
            state.unanswered.removeAll { $0.due <= now }
            return due
        }
        for continuation in due { continuation.resume() }
    }

    /// Returns once the engine has nothing left to do before the clock moves: every activity with
    /// requests not yet finished has a push waiting for APNs's answer (or waits for a send slot,
    /// when more activities are busy than may be in flight). Routine updates never wait for budget
    /// or backoff under a healthy APNs, so there is no other reason to wait. False if that did
    /// not happen within `limit` of real time (the engine is stuck).
    func quiescent(limit: Duration = .seconds(10)) async -> Bool {
        let round = state.withLock { state in
            state.round += 1
            return state.round
        }
        let watchdog = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            let stuck = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                guard let waiter = state.quietWaiter, waiter.round == round else { return nil }
                state.quietWaiter = nil
                return waiter.continuation
            }
            stuck?.resume(returning: false)
        }
        defer { watchdog.cancel() }
        return await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool in
                if Self.isQuiet(state, maximumInFlight: plan.maximumInFlight) { return true }
                state.quietWaiter = (round, continuation)
                return false
            }
            if ready { continuation.resume(returning: true) }
        }
    }

    private static func isQuiet(_ state: State, maximumInFlight: Int) -> Bool {
        state.unanswered.count == min(state.busy, maximumInFlight)
    }

    private static func takeQuietWaiter(_ state: inout State, maximumInFlight: Int) -> CheckedContinuation<Bool, Never>? {
        guard let waiter = state.quietWaiter, isQuiet(state, maximumInFlight: maximumInFlight) else { return nil }
        state.quietWaiter = nil
        return waiter.continuation
    }

    struct Report {
        var outcomes = 0
        var duplicateOutcomes = 0
        var missingOutcomes = 0
        var otherOutcomes = 0
        var mismatches = 0
        var sentTwice = 0
        var wentBack = 0
        var sent = 0
        var sentAt10 = 0
        var coalesced = 0
        var overBudget: [String] = []
        var unusedBudget: [String] = []
        var lastContentMissing: [String] = []
        var maximumHourly = (standard: 0, frequent: 0)
    }

    func report() -> Report {
        state.withLock { state in
            var report = Report(outcomes: state.outcomes, wentBack: state.wentBack, unusedBudget: state.wasted)
            for activity in 0..<plan.activities {
                for mark in state.marks[activity].prefix(plan.seconds) {
                    let outcome = mark & (Mark.delivered | Mark.downgraded | Mark.coalesced | Mark.other)
                    if mark & Mark.twoOutcomes != 0 { report.duplicateOutcomes += 1 }
                    if outcome == 0 { report.missingOutcomes += 1 }
                    if mark & Mark.other != 0 { report.otherOutcomes += 1 }
                    if mark & Mark.sentTwice != 0 { report.sentTwice += 1 }
                    let sent = mark & (Mark.sentAt10 | Mark.sentAt5)
                    if sent != 0 { report.sent += 1 }
                    if sent == Mark.sentAt10 { report.sentAt10 += 1 }
                    if outcome == Mark.coalesced { report.coalesced += 1 }
                    let consistent =
                        (sent == Mark.sentAt10 && outcome == Mark.delivered) || (sent == Mark.sentAt5 && outcome == Mark.downgraded)
                        || (sent == 0 && outcome == Mark.coalesced)
                    if !consistent && outcome != 0 { report.mismatches += 1 }
                }
                if state.marks[activity][plan.seconds - 1] & (Mark.sentAt10 | Mark.sentAt5) == 0 {
                    report.lastContentMissing.append(LoadPlan.activityId(activity))
                }
                let check = Self.checkBudget(state.highPriorityTimes[activity], limits: plan.limits(activity))
                if let excess = check.excess { report.overBudget.append("\(LoadPlan.activityId(activity)): \(excess)") }
                if plan.isFrequent(activity) {
                    report.maximumHourly.frequent = max(report.maximumHourly.frequent, check.maximumHourly)
                } else {
                    report.maximumHourly.standard = max(report.maximumHourly.standard, check.maximumHourly)
                }
            }
            return report
        }
    }

    /// A token bucket of `capacity` refilled at `rate` allows, between its i-th and j-th take,
    /// at most `capacity + rate × (t_j − t_i)` takes (i through j): the bucket held at most
    /// `capacity` before the i-th and gained `rate × (t_j − t_i)` since. Checked for every pair in
    /// one pass: `(j + 1 − rate·t_j) − (i − rate·t_i) ≤ capacity`. Also returns the most
    /// priority-10 sends in any hour.
    static func checkBudget(_ times: [Double], limits: BudgetPolicy.Limits) -> (excess: String?, maximumHourly: Int) {
        let capacity = Double(limits.capacity)
        let rate = capacity / (limits.period / .seconds(1))
        var lowest = Double.infinity
        var excess: String?
        for (j, time) in times.enumerated() {
            lowest = min(lowest, Double(j) - rate * time)
            let taken = Double(j + 1) - rate * time - lowest
            if taken > capacity + 1e-6 && excess == nil {
                excess = "\(times.count) priority-10 sends, more than \(limits.capacity) + refill up to the one at \(time) s"
            }
        }
        var maximumHourly = 0
        var from = 0
        for (j, time) in times.enumerated() {
            while time - times[from] >= 3_600 { from += 1 }
            maximumHourly = max(maximumHourly, j - from + 1)
        }
        return (excess, maximumHourly)
    }
}
