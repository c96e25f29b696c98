import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import ContentService

/// Issue 61 item 6: a push-to-start of an activity sent by broadcast starts it on one more phone,
/// subscribed to the activity's channel (`input-push-channel`, iOS 18).
@Suite("Push-to-start on a broadcast channel")
struct ChannelStartTests {
    static let scores = AppTarget(bundleId: "com.example.scores", environment: .production)
    static let activityKey = "com.example.scores/order-42"
    static let channel = "Y2hhbm5lbC1vZi1tLTE="

    static func fingerprint(_ seed: String) -> String { TokenFingerprint.of(token: String(repeating: seed, count: 32)) }

    static func startKey(_ deviceId: String) -> String {
        MessageKey.pushToStart(bundleId: scores.bundleId, deviceId: deviceId, attributesType: "MatchAttributes")
    }

    /// Ana's phone (d1, French) and iPad (d2); Mallory's phone (d3).
    func tokens() -> PartitionTokens {
        let tokens = PartitionTokens.whole()
        for (deviceId, user, seed, locale) in [("d1", "ana", "ab", "fr-FR"), ("d2", "ana", "cd", nil), ("d3", "mallory", "ef", nil)] {
            tokens.put(
                TokenRecord(
                    kind: .pushToStart, deviceId: deviceId, userId: user, token: String(repeating: seed, count: 32), app: Self.scores,
                    attributesType: "MatchAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
                    updatedAt: now, locale: locale),
                key: Self.startKey(deviceId))
        }
        return tokens
    }

    static let fields: [String: JSONValue] = ["matchId": .string("m-1"), "homeTeam": .string("Lions"), "awayTeam": .string("Bears"), "minute": .integer(1)]

    func match(_ kind: ActivityEventKind, sequence: Int64, minute: Int64 = 1) -> ActivityEvent {
        var fields = Self.fields
        fields["minute"] = .integer(minute)
        var match = event("MatchAttributes", kind, sequence: sequence, at: Double(sequence), fields)
        match.bundleId = Self.scores.bundleId
        return match
    }

    func join(_ target: ActivityEvent.PushToStartTarget, id: String = "join-d1") -> ActivityEvent {
        var join = event(
            "MatchAttributes", .start, sequence: 1, Self.fields, startTarget: target,
            attributes: ["matchId": .string("m-1"), "home": .string("Lions"), "away": .string("Bears")])
        join.eventId = id
        return join
    }

    func onDevice(_ deviceId: String) -> ActivityEvent.PushToStartTarget { .init(app: Self.scores, deviceId: deviceId) }

    func prepared(_ engine: ContentEngine, _ event: ActivityEvent) throws -> ContentEngine.Prepared {
        guard case .send(let prepared) = try engine.prepare(event, partition: 0) else { throw ContentError(field: "-", problem: "ignored") }
        engine.commit(prepared)
        return prepared
    }

    /// The match started, and its first broadcast answered on the channel (`owning`: the
    /// partitions the engine tracks from the start).
    func startedMatch(clock: ManualClock = ManualClock(now.addingTimeInterval(60)), owning partitions: Set<Int32>? = nil) throws -> ContentEngine {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        if let partitions { engine.trackChanges(of: partitions) }
        let kickOff = try prepared(engine, match(.start, sequence: 1))
        let broadcast = try #require(kickOff.requests.first)
        #expect(broadcast.isBroadcast)
        engine.record(
            PushOutcome(
                requestId: broadcast.requestId, activityId: "order-42", result: .delivered, attempts: 1, completedAt: clock.date,
                bundleId: Self.scores.bundleId, channelId: Self.channel))
        return engine
    }

    @Test("a phone's start waits for the activity's start and its channel (a 409 to retry, not a 400), then goes to its push-to-start token naming the channel and asking for no token of its own, with the channel's latest timestamp and an alert")
    func startsOnTheChannel() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now.addingTimeInterval(60)))
        #expect(throws: PayloadAssembler.joinBeforeStart) { try engine.prepare(join(onDevice("d1")), partition: 0) }
        let kickOff = try prepared(engine, match(.start, sequence: 1))
        #expect(throws: PayloadAssembler.channelNotMade) { try engine.prepare(join(onDevice("d1")), partition: 0) }
        // The announcement of a broadcast (`sending`) is not its outcome; the delivered one names the channel.
        let broadcast = try #require(kickOff.requests.first)
        engine.record(
            PushOutcome(
                requestId: broadcast.requestId, activityId: "order-42", result: .sending, attempts: 1, completedAt: now.addingTimeInterval(60),
                bundleId: Self.scores.bundleId, channelId: Self.channel))
        #expect(throws: PayloadAssembler.channelNotMade) { try engine.prepare(join(onDevice("d1")), partition: 0) }
        engine.record(
            PushOutcome(
                requestId: broadcast.requestId, activityId: "order-42", result: .delivered, attempts: 1, completedAt: now.addingTimeInterval(61),
                bundleId: Self.scores.bundleId, channelId: Self.channel))
        let memory = try #require(engine.memory(of: Self.activityKey))
        #expect(memory.channelId == Self.channel)

        // A device whose push-to-start token content-service does not know (yet): a retry, not a start without its token.
        #expect(throws: PayloadAssembler.channelStartTokenUnknown) { try engine.prepare(join(onDevice("d7"), id: "join-d7"), partition: 0) }
        let made = try prepared(engine, join(onDevice("d1")))
        #expect(made.memory == nil, "the activity's memory is the channel's")
        #expect(engine.memory(of: Self.activityKey) == memory)
        let start = try #require(made.requests.first)
        #expect(made.requests.count == 1)
        #expect(start.pushToStartKey == Self.startKey("d1") && start.activityId == nil && start.channelId == Self.channel && start.joinsChannel)
        #expect(start.event == .start && !start.isBroadcast && start.channelStoragePolicy == nil && start.alerting)
        #expect(start.sourceActivityId == "order-42" && start.requestId == RequestIds.channelStart(bundleId: Self.scores.bundleId, activityId: "order-42", deviceId: "d1", tokenFingerprint: Self.fingerprint("ab")))
        // The backend's retry under a new event id, or the event read again: the same request, which the dispatcher takes once.
        let retried = try #require(try prepared(engine, join(onDevice("d1"), id: "join-d1-retry")).requests.first)
        #expect(retried.requestId == start.requestId)
        // The app registering the same token again (every launch) changes nothing; a new token (rotated): a new request.
        engine.tokens.put(
            TokenRecord(
                kind: .pushToStart, deviceId: "d1", userId: "ana", token: String(repeating: "ab", count: 32), app: Self.scores,
                attributesType: "MatchAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active,
                registeredAt: now.addingTimeInterval(20), updatedAt: now.addingTimeInterval(20), locale: "fr-FR"),
            key: Self.startKey("d1"))
        let relaunched = try #require(try prepared(engine, join(onDevice("d1"), id: "join-d1-relaunched")).requests.first)
        #expect(relaunched.requestId == start.requestId)
        engine.tokens.put(
            TokenRecord(
                kind: .pushToStart, deviceId: "d1", userId: "ana", token: String(repeating: "a1", count: 32), app: Self.scores,
                attributesType: "MatchAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active,
                registeredAt: now.addingTimeInterval(30), updatedAt: now.addingTimeInterval(30)),
            key: Self.startKey("d1"))
        let afterRegistration = try #require(try prepared(engine, join(onDevice("d1"), id: "join-d1-later")).requests.first)
        #expect(afterRegistration.requestId != start.requestId)
        let aps = try aps(start)
        #expect(aps["input-push-channel"] == .string(Self.channel))
        #expect(aps["input-push-token"] == nil, "the new activity is updated by the channel, not by a token of its own")
        #expect(aps["attributes-type"] == .string("MatchAttributes") && aps["event"] == .string("start") && aps["alert"] != nil)
        #expect(aps["timestamp"] == .integer(memory.lastTimestamp ?? -1) && start.apnsTimestamp == memory.lastTimestamp)
        #expect(start.payload.contains("Lions"))
        #expect(throws: Never.self) { try start.validate() }
        var bytes: [UInt8] = []
        start.writeJSON(into: &bytes)
        #expect(try IsletJSON.decode(PushRequest.self, from: bytes) == start, "the channel id survives the wire")

        // The activity's next broadcast is stamped past the start's: that phone shows it.
        let goal = try prepared(engine, match(.update, sequence: 2, minute: 12))
        #expect(goal.requests.allSatisfy { $0.isBroadcast && $0.apnsTimestamp > start.apnsTimestamp })
    }

    @Test("read back (a restart, a partition moved), a start on the channel and its outcome change nothing of the activity's memory; the changelog keeps the channel; APNs saying it is gone takes it away until the next one")
    func memoryIgnoresChannelStarts() throws {
        let engine = try startedMatch()
        let start = try #require(try prepared(engine, join(onDevice("d1"))).requests.first)
        let before = try #require(engine.memory(of: Self.activityKey))
        engine.replay(start, partition: 0)
        engine.stored(start, at: .init(partition: 3, offset: 9))
        for result in [PushResult.delivered, .failed, .tokenInvalid] {
            engine.record(
                PushOutcome(
                    requestId: start.requestId, pushToStartKey: start.pushToStartKey, result: result, attempts: 1, completedAt: now.addingTimeInterval(90),
                    bundleId: Self.scores.bundleId, attributesType: "MatchAttributes", channelId: Self.channel))
        }
        #expect(engine.memory(of: Self.activityKey) == before)
        #expect(before.latest?.isPushToStart == false && before.startWatch == nil, "no watch for a token that never comes")

        let record = before.record(activityKey: Self.activityKey, partition: 0)
        #expect(record.channelId == Self.channel)
        #expect(ActivityMemory(record).channelId == Self.channel)

        // A broadcast not delivered for another reason leaves it; APNs saying the channel is gone
        // takes it away: a phone's start waits (409) until the next channel is made.
        engine.record(
            PushOutcome(
                requestId: UUID().uuidString, activityId: "order-42", result: .failed, apns: .init(status: 500, reason: "InternalServerError"),
                attempts: 3, completedAt: now.addingTimeInterval(100), bundleId: Self.scores.bundleId, channelId: Self.channel))
        #expect(engine.memory(of: Self.activityKey)?.channelId == Self.channel)
        engine.record(
            PushOutcome(
                requestId: UUID().uuidString, activityId: "order-42", result: .rejected, apns: .init(status: 400, reason: "ChannelNotRegistered"),
                attempts: 1, completedAt: now.addingTimeInterval(110), bundleId: Self.scores.bundleId, channelId: Self.channel))
        #expect(engine.memory(of: Self.activityKey)?.channelId == nil)
        #expect(throws: PayloadAssembler.channelNotMade) { try engine.prepare(join(onDevice("d2"), id: "join-d2"), partition: 0) }
        // A newer channel (the dispatcher made it again) replaces it.
        engine.record(
            PushOutcome(
                requestId: UUID().uuidString, activityId: "order-42", result: .delivered, attempts: 1, completedAt: now.addingTimeInterval(120),
                bundleId: Self.scores.bundleId, channelId: "bmV3ZXI="))
        #expect(engine.memory(of: Self.activityKey)?.channelId == "bmV3ZXI=")
    }

    @Test("a start on the channel for a user goes to each of their devices under each one's own id, none of another user's, none of the other environment's")
    func everyDeviceOfAUser() throws {
        let engine = try startedMatch()
        // Ana's development build on a third phone: its push-to-start token is for sandbox.
        engine.tokens.put(
            TokenRecord(
                kind: .pushToStart, deviceId: "d0", userId: "ana", token: String(repeating: "0d", count: 32),
                app: AppTarget(bundleId: Self.scores.bundleId, environment: .sandbox), attributesType: "MatchAttributes",
                frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now, updatedAt: now),
            key: Self.startKey("d0"))
        let made = try prepared(engine, join(.init(app: Self.scores, userId: "ana"), id: "join-ana"))
        #expect(Set(made.requests.compactMap(\.pushToStartKey)) == [Self.startKey("d1"), Self.startKey("d2")])
        #expect(made.requests.allSatisfy { $0.channelId == Self.channel && $0.joinsChannel && $0.startGroup != nil && $0.app == Self.scores })
        #expect(made.requests.filter(\.isStartCopy).count == 1)
        for request in made.requests {
            let deviceId = try #require(request.pushToStartKey.flatMap(PartitionTokens.deviceId(ofPushToStartKey:)))
            let seed = deviceId == "d1" ? "ab" : "cd"
            #expect(request.requestId == RequestIds.channelStart(bundleId: Self.scores.bundleId, activityId: "order-42", deviceId: deviceId, tokenFingerprint: Self.fingerprint(seed)))
        }
        #expect(made.memory == nil)
    }

    @Test("a phone's start is no event of the match's sequence (one at or below the match's last still goes); once the match ended no phone can start it: a 400, not a retry; a phone of the other environment: a 400")
    func endedRefused() throws {
        let engine = try startedMatch()
        _ = try prepared(engine, match(.update, sequence: 5, minute: 30))
        _ = try prepared(engine, join(onDevice("d1")))
        #expect(engine.memory(of: Self.activityKey)?.lastSequence == 5)
        // A development build's phone (its push-to-start token for sandbox) cannot join a production channel.
        let sandbox = AppTarget(bundleId: Self.scores.bundleId, environment: .sandbox)
        var other = join(.init(app: sandbox, deviceId: "d9"), id: "join-d9")
        other.bundleId = Self.scores.bundleId
        let crossing = #expect(throws: ContentError.self) { try engine.prepare(other, partition: 0) }
        #expect(crossing?.field == "startTarget.app.environment")
        _ = try prepared(engine, match(.end, sequence: 6, minute: 90))
        let error = #expect(throws: ContentError.self) { try engine.prepare(join(onDevice("d2"), id: "join-d2"), partition: 0) }
        #expect(error?.field == "startTarget" && error?.problem.contains("ended") == true)
        #expect(error != PayloadAssembler.joinBeforeStart && error != PayloadAssembler.channelNotMade)
    }

    @Test("a phone's start on the channel that APNs accepted after (or within a minute before) the match's end was made (its dispatcher lagged): the end again, to the channel, found by the channel also after a restart; an outcome from well before the end, a start APNs refused, or a channel APNs said is gone owes nothing")
    func lateStartGetsTheEndAgain() throws {
        let clock = ManualClock(now.addingTimeInterval(60))
        let engine = try startedMatch(clock: clock)
        let early = try #require(try prepared(engine, join(onDevice("d3"), id: "join-d3")).requests.first)
        let start = try #require(try prepared(engine, join(onDevice("d1"))).requests.first)
        func outcome(_ request: PushRequest, _ result: PushResult) -> PushOutcome {
            PushOutcome(
                requestId: request.requestId, pushToStartKey: request.pushToStartKey, result: result, attempts: 1, completedAt: clock.date,
                bundleId: Self.scores.bundleId, attributesType: "MatchAttributes", channelId: Self.channel)
        }
        let acceptedEarly = outcome(early, .delivered)
        clock.advance(90)
        let end = try #require(try prepared(engine, match(.end, sequence: 2, minute: 90)).requests.last)
        #expect(end.event == .end && end.isBroadcast)
        // Read after the end was made (a lagging reader), but APNs accepted it 90 s before: the end reached it.
        engine.record(acceptedEarly)
        #expect(engine.sweep().isEmpty, "the start accepted well before the end was made got it")
        clock.advance(30)
        engine.record(outcome(start, .tokenInvalid))
        #expect(engine.sweep().isEmpty, "APNs refused that start: nothing to end")
        engine.record(outcome(start, .delivered))
        let again = engine.sweep().flatMap(\.requests)
        #expect(again.count == 1)
        let endAgain = try #require(again.first)
        #expect(endAgain.event == .end && endAgain.isBroadcast && endAgain.activityId == "order-42" && endAgain.apnsTimestamp == end.apnsTimestamp)
        #expect(endAgain.requestId == RequestIds.catchUp(of: end.requestId, deviceId: "d1"))
        #expect(throws: Never.self) { try endAgain.validate() }
        #expect(engine.sweep().isEmpty, "once")

        // After a restart (or on the partition's next owner), from the changelog alone: the start
        // itself was written before the checkpoint (never read again), its outcome after.
        let restarted = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        let memory = try #require(engine.memory(of: Self.activityKey))
        restarted.restore(Self.activityKey, memory)
        restarted.record(outcome(start, .delivered))
        #expect(restarted.sweep().flatMap(\.requests).map(\.requestId) == [endAgain.requestId], "the same id: the dispatcher takes it once")
        // Read again with one more phone's late start: a new request (the same id would be taken
        // for the one already sent, and that phone would never end).
        restarted.record(outcome(start, .delivered))
        var late = outcome(start, .delivered)
        late.requestId = UUID().uuidString
        late.pushToStartKey = Self.startKey("d2")
        restarted.record(late)
        let both = restarted.sweep().flatMap(\.requests)
        #expect(both.map(\.requestId) == [RequestIds.catchUp(of: end.requestId, deviceId: "d1,d2")])
        // Another app's outcome naming the same channel id finds nothing.
        var stranger = outcome(start, .delivered)
        stranger.bundleId = "com.example.other"
        restarted.record(stranger)
        #expect(restarted.sweep().isEmpty)

        // APNs said the channel is gone (the end was refused with ChannelNotRegistered): no end
        // again, which would make a new channel.
        let gone = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: clock)
        gone.restore(Self.activityKey, memory)
        gone.record(
            PushOutcome(
                requestId: end.requestId, activityId: "order-42", result: .rejected, apns: .init(status: 400, reason: "ChannelNotRegistered"),
                attempts: 1, completedAt: clock.date, bundleId: Self.scores.bundleId, channelId: Self.channel))
        gone.record(outcome(start, .delivered))
        #expect(gone.sweep().isEmpty)
    }

    @Test("a phone's start APNs accepted and content-service read within a minute before the match's end was made: the end again once the end is made; one read more than a minute before: nothing")
    func startJustBeforeTheEnd() throws {
        let clock = ManualClock(now.addingTimeInterval(60))
        let engine = try startedMatch(clock: clock)
        func accepted(_ deviceId: String) throws {
            let start = try #require(try prepared(engine, join(onDevice(deviceId), id: "join-\(deviceId)")).requests.first)
            engine.record(
                PushOutcome(
                    requestId: start.requestId, pushToStartKey: start.pushToStartKey, result: .delivered, attempts: 1, completedAt: clock.date,
                    bundleId: Self.scores.bundleId, attributesType: "MatchAttributes", channelId: Self.channel))
        }
        try accepted("d3")
        clock.advance(90)
        _ = engine.sweep()
        try accepted("d1")
        clock.advance(30)
        // (The monitor's re-sends of the stale score aside.)
        #expect(engine.sweep().flatMap(\.requests).filter { $0.event == .end }.isEmpty, "live: nothing owed")
        let end = try #require(try prepared(engine, match(.end, sequence: 2, minute: 90)).requests.last)
        let again = engine.sweep().flatMap(\.requests)
        #expect(again.map(\.requestId) == [RequestIds.catchUp(of: end.requestId, deviceId: "d1")], "d1 (30 s before), not d3 (2 minutes before)")
    }

    @Test("a partition gained soon after a match's end (its last owner may have stopped before it sent the end again for a late phone): the end once more, to the channel; not for a match that ended long ago")
    func partitionGainedEndsAgain() throws {
        let clock = ManualClock(now.addingTimeInterval(60))
        let engine = try startedMatch(clock: clock, owning: [1])
        let end = try #require(try prepared(engine, match(.end, sequence: 2, minute: 90)).requests.last)
        clock.advance(30)
        engine.trackChanges(of: [0, 1])
        let again = engine.sweep().flatMap(\.requests)
        let gainedAt = Int64((clock.date.timeIntervalSince1970 * 1_000).rounded())
        #expect(again.map(\.requestId) == [RequestIds.catchUp(of: end.requestId, deviceId: "partition-gained@\(gainedAt)")])
        #expect(again.allSatisfy { $0.event == .end && $0.isBroadcast })
        engine.trackChanges(of: [1])
        clock.advance(ContentEngine.lateDeviceWait)
        engine.trackChanges(of: [0, 1])
        #expect(engine.sweep().isEmpty, "ended too long ago")
    }

    @Test("the backend API: before the channel, the owner answers 409 (retry), an instance owning other partitions publishes it for the owner to decide, one owning none yet answers 409")
    func intakeRefusesUntilTheChannel() async throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens(), clock: ManualClock(now.addingTimeInterval(60)))
        _ = try prepared(engine, match(.start, sequence: 1))
        let published = Counter()
        let owner = EventIntake(engine: engine, partition: { _ in 0 }, owned: { [0] }) { _ in published.add() }
        var join = join(onDevice("d1"))
        join.bundleId = Self.scores.bundleId
        await #expect {
            _ = try await owner.accept(join)
        } throws: { error in
            guard case .notYet(let field, _)? = error as? EventIntake.Refusal else { return false }
            return field == "startTarget"
        }
        #expect(published.value == 0, "nothing published")
        let other = EventIntake(engine: engine, partition: { _ in 0 }, owned: { [1] }) { _ in published.add() }
        #expect(try await other.accept(join).isEmpty)
        #expect(published.value == 1)
        // An instance that owns no partition yet (starting, a rebalance) cannot tell whose it is: a retry.
        let starting = EventIntake(engine: engine, partition: { _ in 0 }, owned: { [] }) { _ in published.add() }
        await #expect {
            _ = try await starting.accept(join)
        } throws: { error in
            if case .notYet? = error as? EventIntake.Refusal { true } else { false }
        }
        #expect(published.value == 1)
    }
}

/// Counts calls (from any task).
final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
