import Foundation
import IsletKafka
import GRPCCore
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing
@testable import ContentService


private func engine(_ clock: ManualClock, freshness: FreshnessPolicy = FreshnessPolicy()) throws -> ContentEngine {
    ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), freshness: freshness, clock: clock)
}

/// Prepares and commits one event (what the loop does once Kafka acknowledged the requests).
@discardableResult
private func apply(_ engine: ContentEngine, _ event: ActivityEvent, partition: Int32? = 0) throws -> [PushRequest] {
    guard case .send(let prepared) = try engine.prepare(event, partition: partition) else { return [] }
    engine.commit(prepared)
    return prepared.requests
}

/// One monitor pass, committed.
private func sweep(_ engine: ContentEngine, owned: Set<Int32>? = nil) -> [PushRequest] {
    let prepared = engine.sweep(owned: owned)
    for item in prepared { engine.commit(item) }
    return prepared.flatMap(\.requests)
}

private let courier: [String: JSONValue] = ["orderId": .string("42"), "courier": .object(["name": .string("Ana")])]

private func delivery(_ status: String, _ kind: ActivityEventKind = .update, sequence: Int64, at clock: ManualClock) -> ActivityEvent {
    var fields = courier
    fields["status"] = .string(status)
    return event("DeliveryAttributes", kind, sequence: sequence, at: clock.date.timeIntervalSince(now), fields)
}

@Suite("Request ids and the activity memory")
struct MemoryTests {
    @Test("request ids come from the event: the same event gives the same ids, another event other ids")
    func deterministicIds() throws {
        let clock = ManualClock(now)
        let first = try engine(clock).prepare(delivery("out_for_delivery", sequence: 1, at: clock))
        clock.advance(30)
        let again = try engine(clock).prepare(delivery("out_for_delivery", sequence: 1, at: clock))
        guard case .send(let a) = first, case .send(let b) = again else { Issue.record("nothing to send"); return }
        #expect(a.requests.map(\.requestId) == b.requests.map(\.requestId))
        #expect(a.requests.allSatisfy { UUID(uuidString: $0.requestId) != nil })
        let food = "com.example.food"
        #expect(RequestIds.content(bundleId: food, activityId: "order-42", eventId: "e1") != RequestIds.content(bundleId: food, activityId: "order-42", eventId: "e2"))
        #expect(RequestIds.content(bundleId: food, activityId: "order-42", eventId: "e1") != RequestIds.content(bundleId: food, activityId: "order-43", eventId: "e1"))
        // Two apps may use the same activity id, and their backends the same event ids.
        #expect(RequestIds.content(bundleId: food, activityId: "order-42", eventId: "e1") != RequestIds.content(bundleId: "com.example.ride", activityId: "order-42", eventId: "e1"))
        // The version and variant bits of a name-based (SHA-1) UUID.
        let id = RequestIds.make("x")
        #expect(Array(id)[14] == "5" && "89ab".contains(Array(id)[19]))
    }

    @Test("an activity the app started itself gets its first content as an update, not a start")
    func appStarted() throws {
        let clock = ManualClock(now)
        let requests = try apply(try engine(clock), delivery("placed", .start, sequence: 1, at: clock))
        #expect(requests.map(\.event) == [.update])
        #expect(try aps(requests[0])["event"] == .string("update"))
        #expect(try aps(requests[0])["input-push-token"] == nil)
    }

    @Test("memory rebuilt from the service's own output equals the memory it had: handled events are recognised after a restart")
    func rebuiltFromOutput() throws {
        let clock = ManualClock(now)
        let original = try engine(clock)
        var sent: [PushRequest] = []
        for (sequence, status) in [(1, "preparing"), (2, "out_for_delivery"), (3, "arriving")] {
            sent += try apply(original, delivery(status, sequence: Int64(sequence), at: clock))
            clock.advance(60)
        }
        let restarted = try engine(clock)
        for request in sent { restarted.replay(request, partition: 0) }
        for request in sent { restarted.replay(request, partition: 0) }  // read twice: no change
        #expect(restarted.memory(of: "com.example.food/order-42") == original.memory(of: "com.example.food/order-42"))
        // The last event again (its offset was not stored before the crash): recognised.
        guard case .ignore = try restarted.prepare(delivery("arriving", sequence: 3, at: clock)) else {
            Issue.record("a handled event was handled again")
            return
        }
        // The next one continues the timestamps and the alert memory (arriving → delivered alerts once more at most).
        let next = try apply(restarted, delivery("delivered", .end, sequence: 4, at: clock))
        #expect(next.first!.apnsTimestamp > sent.last!.apnsTimestamp)
    }
}

@Suite("Freshness monitor")
struct FreshnessMonitorTests {
    @Test("fresh until the stale date; then the latest content again at priority 10 (no alert, later timestamp, new stale date), spaced and bounded; then the end")
    func staleThenResentThenEnded() throws {
        let clock = ManualClock(now)
        var policy = FreshnessPolicy()
        policy.maximumResends = 2
        policy.resendSpacing = .seconds(60)
        policy.severeAfter = .seconds(600)
        let engine = try engine(clock, freshness: policy)
        let sent = try apply(engine, delivery("out_for_delivery", sequence: 1, at: clock))  // stale after 180 s, alerting
        #expect(sweep(engine).isEmpty)
        #expect(engine.freshnessCounts()[.fresh] == 1)

        clock.advance(181)
        #expect(engine.staleActivities().map(\.freshness) == [.staleRecoverable])
        let resend = sweep(engine)
        #expect(resend.count == 1)
        let first = try #require(resend.first)
        #expect(first.event == .update && first.priority == 10 && !first.alerting && first.sourceEventId == nil)
        #expect(first.apnsTimestamp > sent[0].apnsTimestamp)
        #expect(first.staleDate! > clock.date)
        #expect(try aps(first)["content-state"] == (try aps(sent[0])["content-state"]))
        #expect(try aps(first)["alert"] == nil)
        #expect(first.requestId == RequestIds.resend(of: sent[0].requestId, number: 1))
        #expect(engine.freshnessCounts()[.fresh] == 1)

        // Stale again after the re-send's stale date: the second (and last) re-send.
        clock.advance(181)
        #expect(sweep(engine).map(\.requestId) == [RequestIds.resend(of: sent[0].requestId, number: 2)])
        clock.advance(181)
        #expect(sweep(engine).isEmpty, "re-sends are bounded")
        #expect(engine.staleActivities().first?.resends == 2)
        // Severely stale: ended with the final content.
        clock.advance(600)
        #expect(engine.staleActivities().map(\.freshness) == [.severelyStale])
        let end = sweep(engine)
        #expect(end.map(\.event) == [.end])
        #expect(try aps(end[0])["dismissal-date"] != nil)
        #expect(try aps(end[0])["content-state"] == (try aps(sent[0])["content-state"]))
        #expect(sweep(engine).isEmpty && engine.staleActivities().isEmpty, "an ended activity is left alone")
        // A late event for the ended activity is ignored.
        guard case .ignore = try engine.prepare(delivery("arriving", sequence: 2, at: clock)) else {
            Issue.record("an event after the end was sent")
            return
        }
    }

    @Test("a failed delivery makes the content stale at once; re-sends are spaced")
    func failedDelivery() throws {
        let clock = ManualClock(now)
        let engine = try engine(clock)
        let sent = try apply(engine, delivery("preparing", sequence: 1, at: clock))
        engine.record(outcome(sent[0], .failed, at: clock))
        #expect(engine.staleActivities().map(\.freshness) == [.staleRecoverable])
        let resent = sweep(engine)
        #expect(resent.count == 1)
        engine.record(outcome(resent[0], .failed, at: clock))
        clock.advance(30)
        #expect(sweep(engine).isEmpty, "60 s between re-sends")
        clock.advance(31)
        #expect(sweep(engine).count == 1)
    }

    @Test("a dead token ends the watch; a delivered update keeps the activity fresh")
    func deadToken() throws {
        let clock = ManualClock(now)
        let engine = try engine(clock)
        let sent = try apply(engine, delivery("preparing", sequence: 1, at: clock))
        engine.record(outcome(sent[0], .delivered, at: clock))
        #expect(engine.freshnessCounts()[.fresh] == 1)
        engine.record(outcome(sent[0], .tokenInvalid, at: clock))
        clock.advance(3_600)
        #expect(sweep(engine).isEmpty)
        #expect(engine.staleActivities().isEmpty)
    }

    @Test("a dead token ends the watch until the app registers a token again: then the activity is watched (and refreshed) again")
    func tokenRegisteredAgain() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        func register(_ seed: UInt8) {
            let record = TokenRecord(
                kind: .update, activityId: "order-42", userId: "u", token: String(repeating: String(format: "%02x", seed), count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: clock.date,
                updatedAt: clock.date)
            tokens.put(record, key: record.key!)
        }
        register(1)
        let sent = try apply(engine, delivery("preparing", sequence: 1, at: clock))
        var dead = outcome(sent[0], .tokenInvalid, at: clock)
        dead.tokenFingerprint = TokenFingerprint.of(token: String(repeating: "01", count: 32))
        dead.apns = .init(status: 410, reason: "Unregistered", timestamp: clock.date)
        engine.record(dead)
        clock.advance(3_600)
        #expect(sweep(engine).isEmpty, "the token is dead: nothing is refreshed")
        // The same token registered again after the verdict (token-registry: reactivated).
        register(1)
        let refreshed = sweep(engine)
        #expect(refreshed.count == 1, "watched again: its stale content is sent again")
        #expect(engine.memory(of: "com.example.food/order-42")?.gone == false)
    }

    @Test("APNs's verdict is judged by its timestamp, not by when it was read: a registration between the two is alive (issue 57: a re-registration silently undone)")
    func verdictByItsTimestamp() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        func register() {
            let record = TokenRecord(
                kind: .update, activityId: "order-42", userId: "u", token: String(repeating: "01", count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: clock.date,
                updatedAt: clock.date)
            tokens.put(record, key: record.key!)
        }
        register()
        let sent = try apply(engine, delivery("preparing", sequence: 1, at: clock))
        let verdictAt = clock.date.addingTimeInterval(10)
        // The app confirms the token a minute later (token-registry: confirmed, registeredAt moves on) ...
        clock.advance(60)
        register()
        // ... and then APNs's 410 from before that is read.
        clock.advance(5)
        var dead = outcome(sent[0], .tokenInvalid, at: clock)
        dead.tokenFingerprint = TokenFingerprint.of(token: String(repeating: "01", count: 32))
        dead.apns = .init(status: 410, reason: "Unregistered", timestamp: verdictAt)
        engine.record(dead)
        #expect(engine.memory(of: "com.example.food/order-42")?.goneAt == verdictAt, "gone since APNs's time")
        clock.advance(3_600)
        #expect(sweep(engine).count == 1, "the registration after the verdict is alive: the stale content is sent again")
        #expect(engine.memory(of: "com.example.food/order-42")?.gone == false)
    }

    @Test("a request the dispatcher ended tokenInvalid without asking APNs leaves no verdict: the token table's next active record revives the activity")
    func noVerdictWithoutAPNs() throws {
        let clock = ManualClock(now)
        let tokens = PartitionTokens.whole()
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
        let sent = try apply(engine, delivery("preparing", sequence: 1, at: clock))
        var refused = outcome(sent[0], .tokenInvalid, at: clock)
        refused.attempts = 0
        engine.record(refused)
        #expect(engine.memory(of: "com.example.food/order-42")?.gone == true)
        #expect(engine.memory(of: "com.example.food/order-42")?.goneAt == nil)
        clock.advance(3_600)
        #expect(sweep(engine).isEmpty, "no active token: nothing is sent")
        let record = TokenRecord(
            kind: .update, activityId: "order-42", userId: "u", token: String(repeating: "02", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: clock.date,
            updatedAt: clock.date)
        tokens.put(record, key: record.key!)
        #expect(sweep(engine).count == 1)
    }

    @Test("an activity ended by the monitor (severely stale, too old) is to have its token invalidated, with the reason")
    func endsInvalidate() throws {
        let clock = ManualClock(now)
        var policy = FreshnessPolicy()
        policy.maximumResends = 0
        let engine = try engine(clock, freshness: policy)
        try apply(engine, delivery("preparing", sequence: 1, at: clock))
        clock.advance(3_600)
        let prepared = engine.sweep()
        #expect(prepared.map(\.invalidation) == [.severelyStale])
        #expect(prepared.first?.requests.map(\.event) == [.end])
    }

    @Test("invalidations owed to token-registry are sent, and what fails is sent again on the next pass (bounded)")
    func invalidationsRetried() async throws {
        let fake = FakeInvalidator()
        let invalidations = TokenInvalidations(invalidator: fake, metrics: ContentMetrics(), logger: Logger(label: "test"), capacity: 3)
        let item = TokenInvalidations.Item(activityId: "order-42", bundleId: "com.example.food", reason: .severelyStale)
        invalidations.add(item)
        invalidations.add(item)
        fake.failing = true
        await invalidations.flush()
        #expect(invalidations.count == 1 && fake.calls.isEmpty)
        fake.failing = false
        await invalidations.flush()
        #expect(fake.calls == ["com.example.food/order-42 severelyStale"] && invalidations.count == 0)
        for i in 0..<5 { invalidations.add(.init(activityId: "a\(i)", bundleId: "com.example.food", reason: .lifetimeExceeded)) }
        #expect(invalidations.count == 3, "at most its capacity")
        // Only once the end has its outcome: invalidated earlier, the dispatcher would not send the end.
        await invalidations.flush { $0.activityId == "a4" }
        #expect(invalidations.count == 2 && fake.calls.last == "com.example.food/a4 lifetimeExceeded")
        // Refused for good (a key without write): dropped, not tried on every pass.
        fake.refusal = RPCError(code: .permissionDenied, message: "read only")
        await invalidations.flush()
        #expect(invalidations.count == 0)
    }

    @Test("a second start for a live activity is refused (it would put a second Live Activity on the phone); after the end it may start again")
    func secondStart() throws {
        let clock = ManualClock(now)
        let engine = try engine(clock)
        try apply(engine, delivery("placed", .start, sequence: 1, at: clock))
        #expect { try engine.prepare(delivery("placed", .start, sequence: 2, at: clock)) } throws: { ($0 as? ContentError)?.field == "kind" }
        try apply(engine, delivery("delivered", .end, sequence: 3, at: clock))
        #expect(try apply(engine, delivery("placed", .start, sequence: 4, at: clock)).map(\.event) == [.update], "a new life for the id")

        // A push-to-start APNs refused never started the activity: the backend may try again; one
        // whose answer is unknown (failed) may have, and is not started twice.
        let target = ActivityEvent.PushToStartTarget(app: app, deviceId: "device-1")
        func remoteStart(_ sequence: Int64) -> ActivityEvent {
            var start = delivery("placed", .start, sequence: sequence, at: clock)
            start.activityId = "order-43"
            start.startTarget = target
            start.attributes = ["orderId": .string("43")]
            return start
        }
        for (result, again) in [(PushResult.rejected, true), (.awaitingToken, true), (.failed, false)] {
            let remote = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
            let sent = try apply(remote, remoteStart(1))
            remote.record(PushOutcome(
                requestId: sent[0].requestId, pushToStartKey: sent[0].pushToStartKey, result: result, attempts: 1, completedAt: clock.date,
                bundleId: app.bundleId))
            if again {
                #expect(try apply(remote, remoteStart(2)).map(\.event) == [.start], "after \(result.rawValue)")
            } else {
                #expect(throws: ContentError.self, "after \(result.rawValue)") { try remote.prepare(remoteStart(2)) }
            }
        }
    }

    @Test("every activity is ended with its latest content 7 h 50 min after its start, before iOS's 8 hours")
    func lifetime() throws {
        let clock = ManualClock(now)
        var policy = FreshnessPolicy()
        policy.severeAfter = .seconds(28_800)
        policy.maximumResends = 0
        let engine = try engine(clock, freshness: policy)
        try apply(engine, delivery("placed", .start, sequence: 1, at: clock))
        var sequence: Int64 = 1
        // Updates keep coming every 20 minutes: never stale, but the lifetime runs out.
        while clock.date.timeIntervalSince(now) < 7 * 3_600 + 40 * 60 {
            clock.advance(1_200)
            sequence += 1
            try apply(engine, delivery("preparing", sequence: sequence, at: clock))
            #expect(sweep(engine).isEmpty)
        }
        clock.advance(10 * 60)
        let end = sweep(engine)
        #expect(end.map(\.event) == [.end])
        #expect(end.first?.contentSequence == sequence)
        #expect(clock.date.timeIntervalSince(now) < 8 * 3_600)
    }

    @Test("an instance looks after the activities of its own partitions only")
    func ownedPartitions() throws {
        let clock = ManualClock(now)
        let engine = try engine(clock)
        try apply(engine, delivery("preparing", sequence: 1, at: clock), partition: 3)
        clock.advance(3_600)
        #expect(engine.sweep(owned: [0, 1]).isEmpty)
        #expect(engine.sweep(owned: [3]).count == 1)
    }
}

private func outcome(_ request: PushRequest, _ result: PushResult, at clock: ManualClock) -> PushOutcome {
    PushOutcome(
        requestId: request.requestId, activityId: request.activityId, result: result, attempts: 1, completedAt: clock.date,
        bundleId: request.app.bundleId)
}

final class FakeInvalidator: ActivityInvalidating {
    private let state = Mutex<(calls: [String], failing: Bool, refusal: RPCError?)>(([], false, nil))
    var calls: [String] { state.withLock { $0.calls } }
    var failing: Bool {
        get { state.withLock { $0.failing } }
        set { state.withLock { $0.failing = newValue } }
    }
    var refusal: RPCError? {
        get { state.withLock { $0.refusal } }
        set { state.withLock { $0.refusal = newValue } }
    }

    func invalidate(activityId: String, bundleId: String, reason: InvalidationReason) async throws {
        try state.withLock { state in
            if let refusal = state.refusal { throw refusal }
            if state.failing { throw ContentError(field: "registry", problem: "unreachable") }
            state.calls.append("\(bundleId)/\(activityId) \(reason.rawValue)")
        }
    }
}

@Suite("The latest payload is read again from Kafka, not kept")
struct StoredPayloadTests {
    /// Payloads "on Kafka": what a position holds.
    final class Topic: Sendable {
        let records = AwaitedLog<(KafkaPosition, PushRequest)>()
        func store(_ request: PushRequest, in engine: ContentEngine) {
            let position = KafkaPosition(partition: 0, offset: Int64(records.count))
            records.append((position, request))
            engine.stored(request, at: position)
        }
        func read(_ wanted: [ContentEngine.PayloadToRead]) -> [String: (position: KafkaPosition, request: PushRequest)] {
            let all = Dictionary(records.values.map { ($0.0, $0.1) }, uniquingKeysWith: { first, _ in first })
            var found: [String: (position: KafkaPosition, request: PushRequest)] = [:]
            for item in wanted { if let request = all[item.position] { found[item.activityKey] = (item.position, request) } }
            return found
        }
    }

    @Test("once Kafka has the latest request its payload is dropped; the monitor asks for it, and with it sends what it sends when the payload is kept")
    func readAgainForResendAndEnd() throws {
        let clock = ManualClock(now)
        var policy = FreshnessPolicy()
        policy.maximumResends = 1
        let kept = try engine(clock, freshness: policy)
        let dropped = try engine(clock, freshness: policy)
        let topic = Topic()
        let key = "com.example.food/order-42"
        for engine in [kept, dropped] { try apply(engine, delivery("out_for_delivery", sequence: 1, at: clock)) }
        // Kafka acknowledged it (the sender reports where).
        let latest = try #require(dropped.memory(of: key)?.latestRequest)
        topic.store(latest, in: dropped)
        #expect(dropped.memory(of: key)?.latestRequest == nil, "not kept once Kafka has it")
        #expect(dropped.memory(of: key)?.latest?.requestId == latest.requestId)
        #expect(dropped.memory(of: key)?.payloadStoredAt == KafkaPosition(partition: 0, offset: 0))
        #expect(kept.memory(of: key)?.latestRequest?.payload.isEmpty == false)

        /// What a monitor pass sends, reading the payloads it lacks as the monitor does.
        func pass(_ engine: ContentEngine) -> [PushRequest] {
            var sent = sweep(engine)
            let wanted = engine.takePayloadsToRead()
            if !wanted.isEmpty {
                engine.restorePayloads(topic.read(wanted))
                sent += sweep(engine)
            }
            for request in sent { topic.store(request, in: engine) }
            return sent
        }
        clock.advance(181)
        let resendKept = pass(kept)
        #expect(sweep(dropped).isEmpty, "without the payload nothing is sent…")
        #expect(
            dropped.takePayloadsToRead() == [.init(activityKey: key, position: KafkaPosition(partition: 0, offset: 0), requestId: latest.requestId)],
            "…and it is asked for")
        let resendDropped = pass(dropped)
        #expect(resendKept.count == 1)
        #expect(resendDropped.map(\.requestId) == resendKept.map(\.requestId))
        #expect(resendDropped.map(\.payload) == resendKept.map(\.payload))
        #expect(dropped.memory(of: key)?.latestRequest == nil, "the re-send, stored, is dropped too")

        // Severely stale: the end, from the re-send's payload read again.
        clock.advance(900)
        let endKept = pass(kept)
        let endDropped = pass(dropped)
        #expect(endKept.map(\.event) == [.end])
        #expect(endDropped.map(\.payload) == endKept.map(\.payload))
    }

    @Test("a request read back from the topic keeps no payload, but what it carried is remembered (images inlined)")
    func replayed() throws {
        let clock = ManualClock(now)
        let writer = try engine(clock)
        let sent = try apply(writer, delivery("out_for_delivery", sequence: 1, at: clock))
        let reader = try engine(clock)
        reader.replay(sent[0], partition: 0, storedAt: KafkaPosition(partition: 0, offset: 7))
        let memory = try #require(reader.memory(of: "com.example.food/order-42"))
        #expect(memory.latestRequest == nil && memory.latest?.requestId == sent[0].requestId)
        #expect(memory.payloadToRead == KafkaPosition(partition: 0, offset: 7))
        #expect(memory.lastSequence == 1 && memory.lastTimestamp == sent[0].apnsTimestamp)
        // A position for a request that is not the latest changes nothing.
        reader.stored(sent[0], at: KafkaPosition(partition: 0, offset: 9))
        #expect(reader.memory(of: "com.example.food/order-42")?.payloadStoredAt == KafkaPosition(partition: 0, offset: 7))
    }

    @Test("a payload not found where it was stored is not asked for again, and the activity is put off, until its next request")
    func lost() throws {
        let clock = ManualClock(now)
        let engine = try engine(clock)
        let key = "com.example.food/order-42"
        try apply(engine, delivery("out_for_delivery", sequence: 1, at: clock))
        let latest = try #require(engine.memory(of: key)?.latestRequest)
        engine.stored(latest, at: KafkaPosition(partition: 0, offset: 3))
        clock.advance(181)
        #expect(sweep(engine).isEmpty)
        let wanted = engine.takePayloadsToRead()
        #expect(wanted.count == 1)
        engine.restorePayloads([:], lost: wanted)
        #expect(engine.memory(of: key)?.payloadLost == true)
        #expect(sweep(engine).isEmpty && engine.takePayloadsToRead().isEmpty, "not asked for again")
        clock.advance(1)
        _ = sweep(engine)
        #expect(engine.examinedInLastSweep == 0, "put off, not looked at on every pass")
        // The next event brings a payload again.
        let next = try apply(engine, delivery("arriving", sequence: 2, at: clock))
        #expect(next.count == 1 && engine.memory(of: key)?.payloadLost == false)
    }
}
