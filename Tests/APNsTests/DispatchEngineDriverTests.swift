import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import APNsDispatcher

/// An outcome sink whose outcomes a test can await.
final class AwaitedSink: OutcomeSink {
    let log = AwaitedLog<PushOutcome>()
    var final: [PushOutcome] { log.values.filter(\.result.isFinal) }
    /// How many of the next outcomes are refused (a broker down), and how many were.
    let failing = Atomic<Int>(0)
    let refused = Atomic<Int>(0)
    func publish(_ outcome: PushOutcome) async throws {
        if failing.wrappingSubtract(1, ordering: .relaxed).oldValue > 0 {
            refused.add(1, ordering: .relaxed)
            throw KafkaStandIn.refused
        }
        failing.store(0, ordering: .relaxed)
        log.append(outcome)
    }
    enum KafkaStandIn: Error { case refused }
    let channels = AwaitedLog<BroadcastChannelRecord>()
    func record(_ channel: BroadcastChannelRecord) async throws { channels.append(channel) }
}

/// The engine that drives ``DispatchMachine``: its workers, its timer on the manual clock, its
/// backpressure and its drain. The machine's rules are tested in ``EngineTests``.
@Suite("The dispatch engine's driver", .timeLimit(.minutes(1)))
struct DispatchEngineDriverTests {
    final class Running: Sendable {
        let clock = ManualClock()
        let sender = ScriptedSender()
        let sink = AwaitedSink()
        let tokens = PartitionTokens.forTests()
        let done = AwaitedLog<UInt64>()
        let engine: DispatchEngine
        let policy: DispatcherPolicy
        private let runner: Task<Void, Never>
        private let tickets = Atomic<UInt64>(0)

        init(policy: DispatcherPolicy = DispatcherPolicy()) {
            let done = self.done
            self.policy = policy
            engine = DispatchEngine(
                sender: sender, tokens: tokens, outcomes: sink, policy: policy, teams: ["com.example.food": "TEAM123456"], clock: clock,
                random: { 0.5 }, logger: quietLogger, onDone: { done.append($0) })
            let engine = self.engine
            runner = Task { await engine.run() }
        }

        func register(_ activity: String, token: String) {
            let now = clock.date
            tokens.put(
                TokenRecord(
                    kind: .update, activityId: activity, userId: "u", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
                    attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, activityStartedAt: now,
                    registeredAt: now, updatedAt: now),
                key: MessageKey.activity(bundleId: "com.example.food", activityId: activity))
        }

        func request(_ activity: String, sequence: Int64, supersedable: Bool = true) -> PushRequest {
            PushRequest(
                requestId: UUID().uuidString.lowercased(), activityId: activity, event: .update,
                app: AppTarget(bundleId: "com.example.food", environment: .production), attributesType: "DeliveryAttributes",
                payload: payload(extra: #","sequence":\#(sequence)"#), priority: 10, urgency: .routine, supersedable: supersedable, alerting: false,
                apnsTimestamp: 1_795_000_000 + sequence, contentSequence: sequence, createdAt: clock.date)
        }

        @discardableResult
        func submit(_ request: PushRequest) async -> Bool {
            await engine.submit(request, ticket: tickets.wrappingAdd(1, ordering: .relaxed).newValue)
        }

        func stop() async {
            engine.finish()
            await runner.value
        }
    }

    @Test("a request is sent by a worker and its ticket is done once its outcome is persisted; a token applied later sends the request that waited for it")
    func sendsAndTokenArrival() async {
        let r = Running()
        r.register("a", token: hexToken(1))
        await r.submit(r.request("a", sequence: 1))
        await r.done.wait(for: 1)
        #expect(r.sink.final.map(\.result) == [.delivered])
        let late = r.request("late", sequence: 1)
        await r.submit(late)
        r.register("late", token: hexToken(2))
        await r.done.wait(for: 2)
        #expect(r.sink.final.last?.requestId == late.requestId && r.sink.final.last?.result == .delivered)
        await r.stop()
    }

    @Test("an outcome the sink does not persist is handed over again after 100 ms, then 200 ms: its request's ticket is done only once it is persisted")
    func outcomeHandedOverAgain() async {
        let r = Running()
        r.sink.failing.store(2, ordering: .relaxed)
        r.register("a", token: hexToken(1))
        let start = r.clock.date
        await r.submit(r.request("a", sequence: 1))
        await r.clock.sleeper(until: start.addingTimeInterval(0.1))
        #expect(r.done.values.isEmpty && r.sink.refused.load(ordering: .relaxed) == 1, "refused once: the ticket stays open")
        r.clock.advance(0.1)
        await r.clock.sleeper(until: r.clock.date.addingTimeInterval(0.2))
        #expect(r.done.values.isEmpty && r.sink.refused.load(ordering: .relaxed) == 2, "refused again: the next try after 200 ms")
        r.clock.advance(0.2)
        await r.done.wait(for: 1)
        #expect(r.sink.final.map(\.result) == [.delivered], "persisted once, on the third try")
        #expect(r.sender.sent.count == 1, "the push itself was not sent again")
        await r.stop()
    }

    @Test("the timer wakes the machine when the clock reaches the time it asked for: a retry after its backoff")
    func timerWakesRetry() async {
        let r = Running()
        r.register("a", token: hexToken(1))
        r.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        let start = r.clock.date
        await r.submit(r.request("a", sequence: 1))
        let retryAt = start.addingTimeInterval(r.policy.retry.delay(afterAttempts: 1, random: 0.5) / .seconds(1))
        await r.clock.sleeper(until: retryAt)
        #expect(r.sender.sent.count == 1 && r.sink.final.isEmpty, "the retry waits for its backoff")
        r.clock.advance(by: r.policy.retry.delay(afterAttempts: 1, random: 0.5))
        await r.done.wait(for: 1)
        #expect(r.sink.final.map(\.result) == [.delivered])
        #expect(r.sink.final.first?.attempts == 2)
        await r.stop()
    }

    @Test("after ExpiredProviderToken the provider token is renewed (and the connections replaced) before the retry reaches a worker: it never goes out on the connection being closed")
    func renewalBeforeRetry() async {
        for round in 0..<20 {
            let r = Running()
            r.register("a", token: hexToken(round))
            r.sender.script(hexToken(round), [APNsAnswer(status: 403, reason: "ExpiredProviderToken")])
            await r.submit(r.request("a", sequence: 1))
            await r.done.wait(for: 1)
            #expect(r.sink.final.map(\.result) == [.delivered])
            #expect(r.sender.renewalsAtSend == [0, 1], "round \(round): the retry was sent after the renewal")
            await r.stop()
        }
    }

    @Test("a drain waits for the push in flight and its outcome, and a request submitted after it is refused; its timeout ends it all the same")
    func drain() async {
        let r = Running()
        r.register("a", token: hexToken(1))
        r.sender.hold()
        await r.submit(r.request("a", sequence: 1))
        let deadline = r.clock.date.addingTimeInterval(8)
        let draining = Task { await r.engine.drain(timeout: .seconds(8)) }
        await r.clock.sleeper(until: deadline)  // the drain waits: for the push, or for its deadline
        r.sender.release()
        await draining.value
        #expect(r.sink.final.map(\.result) == [.delivered], "the push in flight got its outcome before the drain ended")
        #expect(r.done.values.count == 1)
        #expect(await r.submit(r.request("a", sequence: 2)) == false, "not taken once a drain began")
        await r.stop()

        let stuck = Running()
        stuck.register("a", token: hexToken(1))
        stuck.sender.hold()
        await stuck.submit(stuck.request("a", sequence: 1))
        let stuckDeadline = stuck.clock.date.addingTimeInterval(8)
        let timingOut = Task { await stuck.engine.drain(timeout: .seconds(8)) }
        await stuck.clock.sleeper(until: stuckDeadline)
        stuck.clock.advance(8)
        await timingOut.value
        #expect(stuck.sink.final.isEmpty, "APNs never answered: the drain ended at its deadline")
        stuck.sender.release()
        await stuck.stop()
    }

    @Test("with the queues full, reading waits until a request leaves them")
    func backpressure() async {
        var policy = DispatcherPolicy()
        policy.maximumQueued = 1
        let r = Running(policy: policy)
        r.register("a", token: hexToken(1))
        r.sender.hold()
        await r.submit(r.request("a", sequence: 1, supersedable: false))  // in flight
        await r.submit(r.request("a", sequence: 2, supersedable: false))  // waits behind it: the queues are full
        let third = Task { await r.submit(r.request("a", sequence: 3, supersedable: false)) }
        // The third submit waits for room (the suite's time limit fails the test if it never does).
        while r.engine.waitingSubmitters == 0 { await Task.yield() }
        #expect(r.sender.answers == 0 && r.sink.final.isEmpty, "it waits while nothing has left the queue")
        r.sender.release()
        #expect(await third.value, "taken once the first request was answered and the second left the queue")
        await r.done.wait(for: 3)
        #expect(r.sink.final.map(\.result) == [.delivered, .delivered, .delivered])
        await r.stop()
    }
}
