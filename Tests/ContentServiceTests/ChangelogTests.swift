import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing
@testable import ContentService

/// content-service's changelog (`islet.content-memory.v1`): what is written, when, and where a
/// restart reads from.
@Suite("content-service's changelog")
struct ChangelogTests {
    static let key = MessageKey.activity(bundleId: app.bundleId, activityId: "order-42")

    func delivery(_ sequence: Int64, _ status: String, activity: String = "order-42") -> ActivityEvent {
        var event = event("DeliveryAttributes", sequence: sequence, ["status": .string(status), "orderId": .string("42")])
        event.activityId = activity
        event.eventId = "\(activity)-\(sequence)"
        return event
    }

    func send(_ engine: ContentEngine, _ event: ActivityEvent, partition: Int32) throws -> ContentEngine.Prepared {
        guard case .send(let prepared) = try engine.prepare(event, partition: partition) else { throw ContentError(field: "event", problem: "ignored") }
        engine.commit(prepared)
        return prepared
    }

    @Test("a memory written and read back is the same memory: outcomes, alerts, images, the stored payload's place, a dead token")
    func roundTrip() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let first = try send(engine, delivery(1, "preparing"), partition: 3)
        engine.stored(first.requests[0], at: KafkaPosition(partition: 3, offset: 41))
        let second = try send(engine, delivery(2, "out_for_delivery"), partition: 3)
        #expect(engine.memory(of: Self.key)?.latestRequest != nil, "kept in full until Kafka has it")
        engine.stored(second.requests[0], at: KafkaPosition(partition: 3, offset: 42))
        engine.record(PushOutcome(
            requestId: first.requests[0].requestId, activityId: "order-42", result: .delivered, attempts: 1, completedAt: now, bundleId: app.bundleId))
        engine.record(PushOutcome(
            requestId: second.requests[0].requestId, activityId: "order-42", result: .tokenInvalid, attempts: 1, tokenFingerprint: "ab12",
            completedAt: now.addingTimeInterval(1), bundleId: app.bundleId))
        var memory = try #require(engine.memory(of: Self.key))
        memory.inlinedImages = ["https://cdn.example.com/a.png"]
        memory.pendingImages = ["r9": .init(urls: ["https://cdn.example.com/b.png"], since: now)]
        #expect(memory.gone && memory.outcomes.count == 2 && memory.alertTimes.count == 1)

        let record = memory.record(activityKey: Self.key, partition: 3)
        #expect(record.bundleId == app.bundleId && record.activityId == "order-42" && record.partition == 3)
        let decoded = try IsletJSON.decode(ContentMemoryRecord.self, from: IsletJSON.encode(ContentMemoryRecord(activity: record, writtenAt: now)))
        #expect(ActivityMemory(try #require(decoded.activity)) == memory)
    }

    @Test("a record of the changelog's first version (the whole latest request in it) is read: an upgrade keeps every memory")
    func firstVersionRead() throws {
        let json = #"{"activity":{"activityId":"order-42","alertTimes":["2026-11-22T10:02:11.690Z","2026-11-22T10:15:30.214Z"],"bundleId":"com.example.fooddelivery","contentRequestId":"761FBAD2-5120-49C1-A1CB-D688796ADE2B","ended":false,"gone":false,"inlinedImages":["https://cdn.example.com/couriers/ana.png"],"lastSequence":5,"lastState":"out_for_delivery","lastTimestamp":1795342530,"latest":{"activityId":"order-42","alerting":true,"apnsTimestamp":1795342530,"app":{"bundleId":"com.example.fooddelivery","environment":"production"},"attributesType":"DeliveryAttributes","contentSequence":5,"createdAt":"2026-11-22T10:15:30.214Z","event":"update","expiration":"2026-11-22T10:25:30.000Z","payload":"","priority":10,"requestId":"761FBAD2-5120-49C1-A1CB-D688796ADE2B","schemaVersion":1,"sourceActivityId":"order-42","sourceEventId":"orders-outbox-88314","staleDate":"2026-11-22T10:45:30.000Z","state":"out_for_delivery","supersedable":true,"urgency":"important"},"outcomes":[{"requestId":"761FBAD2-5120-49C1-A1CB-D688796ADE2B","result":"delivered"}],"partition":2,"payloadStoredAt":{"offset":18342,"partition":2},"pendingImages":[{"requestId":"0C1B2A39-4857-4E6F-8A9B-C0D1E2F3A4B5","since":"2026-11-22T10:16:02.005Z","urls":["https://cdn.example.com/maps/42.png"]}],"resends":0,"startedAt":"2026-11-22T10:02:11.690Z"},"schemaVersion":1,"writtenAt":"2026-11-22T10:16:03.120Z"}"#
        let record = try IsletJSON.decode(ContentMemoryRecord.self, from: Array(json.utf8))
        let memory = ActivityMemory(try #require(record.activity))
        #expect(memory.latest?.requestId == "761FBAD2-5120-49C1-A1CB-D688796ADE2B" && memory.latest?.isContent == true)
        #expect(memory.latest?.contentSequence == 5 && memory.latest?.staleDate != nil && memory.latest?.isPushToStart == false)
        #expect(memory.outcome(of: "761FBAD2-5120-49C1-A1CB-D688796ADE2B") == .delivered && memory.lastSequence == 5)
        #expect(memory.payloadToRead == KafkaPosition(partition: 2, offset: 18_342) && !memory.payloadLost)
        #expect(memory.contentRequestId == memory.latest?.requestId && memory.pendingImages.count == 1)
    }

    @Test("a memory whose latest request has no place on Kafka is restored as one whose payload is lost: left alone until its next request")
    func restoredWithoutPlace() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        _ = try send(engine, delivery(1, "preparing"), partition: 1)
        let memory = try #require(engine.memory(of: Self.key))
        #expect(memory.payloadStoredAt == nil && memory.latestRequest != nil, "its delivery report gave no offset")
        let restored = ActivityMemory(memory.record(activityKey: Self.key, partition: 1))
        #expect(restored.payloadLost && restored.payloadToRead == nil && restored.latest == memory.latest)
    }

    @Test("what changed is taken once per partition owned; a memory restored from the changelog is not written back; a forgotten one is a tombstone")
    func unwrittenByPartition() throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        _ = try send(engine, delivery(1, "preparing", activity: "a"), partition: 0)
        let b = try send(engine, delivery(1, "preparing", activity: "b"), partition: 1)
        _ = try send(engine, delivery(2, "out_for_delivery", activity: "a"), partition: 0)

        let taken = engine.takeUnwritten(partitions: [0])
        #expect(taken.map(\.activityKey) == ["com.example.food/a"], "one record for two changes")
        #expect(taken.first?.memory?.lastSequence == 2)
        #expect(engine.takeUnwritten(partitions: [0]).isEmpty)
        #expect(engine.unwrittenCount(partitions: [1]) == 1, "another partition's changes wait until it is owned")

        // Handed back after a failed write: taken again.
        engine.unwrittenAgain(taken)
        #expect(engine.takeUnwritten(partitions: [0]).map(\.activityKey) == ["com.example.food/a"])

        // An outcome, and a payload stored, change the memory too.
        engine.record(PushOutcome(requestId: b.requests[0].requestId, activityId: "b", result: .delivered, attempts: 1, completedAt: now, bundleId: app.bundleId))
        #expect(engine.takeUnwritten(partitions: [1]).map(\.activityKey) == ["com.example.food/b"])
        engine.stored(b.requests[0], at: KafkaPosition(partition: 1, offset: 7))
        #expect(engine.takeUnwritten(partitions: [1]).first?.memory?.payloadStoredAt == KafkaPosition(partition: 1, offset: 7))

        // Restored: nothing to write.
        var restored = ActivityMemory()
        restored.partition = 0
        restored.lastSequence = 9
        engine.restore("com.example.food/c", restored)
        #expect(engine.unwrittenCount(partitions: [0, 1]) == 0)
        #expect(engine.memory(of: "com.example.food/c")?.lastSequence == 9)

        // Ended and forgotten after the retention: a tombstone.
        _ = try send(engine, { var e = delivery(3, "delivered", activity: "a"); e.kind = .end; return e }(), partition: 0)
        _ = engine.takeUnwritten(partitions: [0])
        clock.advance(by: engine.freshness.retention + .seconds(60))
        _ = engine.sweep(owned: [0, 1])
        let forgotten = engine.takeUnwritten(partitions: [0])
        #expect(forgotten.map(\.activityKey) == ["com.example.food/a"])
        #expect(forgotten.first.map { $0.memory == nil } == true)
    }

    @Test("only the partitions assigned are tracked; one gained from another instance has every memory to write; one revoked and assigned back does not")
    func trackedByAssignment() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        _ = try send(engine, delivery(1, "preparing", activity: "a"), partition: 0)
        _ = try send(engine, delivery(1, "preparing", activity: "b"), partition: 1)
        // Before the first assignment every change is tracked (a start's rebuild); then only the partitions assigned.
        engine.trackChanges(of: [0])
        #expect(engine.unwrittenCount(partitions: [0]) == 1 && engine.unwrittenCount(partitions: [1]) == 0)
        _ = engine.takeUnwritten(partitions: [0])
        _ = try send(engine, delivery(2, "out_for_delivery", activity: "b"), partition: 1)
        #expect(engine.unwrittenCount(partitions: [1]) == 0, "another instance's partition")
        // Assigned back the same partition (a rebalance): nothing to write again.
        engine.trackChanges(of: [0])
        #expect(engine.unwrittenCount(partitions: [0, 1]) == 0)
        // Partition 1 gained: its memories, changed here while another instance owned it, are all written.
        engine.trackChanges(of: [0, 1])
        #expect(engine.takeUnwritten(partitions: [1]).map(\.activityKey) == ["com.example.food/b"])
        // Partition 0 given away: its changes are not tracked any more, and not handed back either.
        engine.trackChanges(of: [1])
        let a = try send(engine, delivery(2, "out_for_delivery", activity: "a"), partition: 0)
        engine.unwrittenAgain([.init(partition: 0, activityKey: a.activityKey, memory: nil)])
        #expect(engine.unwrittenCount(partitions: [0]) == 0)
    }

    @Test("forgetting partitions drops their memories, deadlines and freshness counts and writes nothing to the changelog; other partitions stay")
    func forgetPartitions() throws {
        let clock = ManualClock(now)
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        for (index, partition) in [Int32(0), 1, 1].enumerated() { _ = try send(engine, delivery(1, "preparing", activity: "order-\(index)"), partition: partition) }
        engine.trackChanges(of: [0, 1])
        _ = engine.takeUnwritten(partitions: [0, 1])
        _ = try send(engine, delivery(2, "out_for_delivery", activity: "order-1"), partition: 1)
        clock.advance(601)  // past the stale date: counted stale
        #expect(engine.freshnessCounts()[.staleRecoverable] == 3)

        #expect(engine.forget(partitions: [1]) == 2)
        #expect(engine.activityCount == 1 && engine.memory(of: "com.example.food/order-0") != nil)
        #expect(engine.unwrittenCount(partitions: [0, 1]) == 0, "nothing of a forgotten partition is written")
        #expect(engine.freshnessCounts()[.staleRecoverable] == 1)
        #expect(engine.sweep(owned: [0, 1]).map(\.activityKey) == ["com.example.food/order-0"], "no deadline of a forgotten activity is left")
        #expect(engine.forget(partitions: []) == 0)
    }

    @Test("a push-to-start request read back places its activity's memory in the activity's partition, not in the push-to-start key's")
    func pushToStartPartition() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let loader = ContentMemoryLoader(engine: engine, since: now, metrics: ContentMetrics(), logger: Logger(label: "test")) { topics, since, _, _ in
            try KafkaConsumer(configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: topics, since: since), logger: Logger(label: "test"))
        }
        let request = PushRequest(
            requestId: "s1", pushToStartKey: "pts:com.example.food:device-1:DeliveryAttributes", event: .start, app: app,
            attributesType: "DeliveryAttributes", payload: #"{"aps":{"event":"start"}}"#, priority: 10, urgency: .important, supersedable: false,
            alerting: true, apnsTimestamp: 1_795_000_000, contentSequence: 1, createdAt: now, sourceEventId: "e1", sourceActivityId: "order-9")
        let keyPartition = KafkaPartitioner.partition(ofKey: request.pushToStartKey!, partitions: 48)
        let activityPartition = KafkaPartitioner.partition(ofKey: "order-9", partitions: 48)
        try #require(keyPartition != activityPartition, "the example needs the two apart")
        func read() throws {
            loader.apply(KafkaMessage(
                topic: IsletTopics.pushRequests.name, partition: keyPartition, offset: 0, key: Array(request.pushToStartKey!.utf8),
                value: try IsletJSON.encode(request)))
        }
        try read()
        #expect(engine.memory(of: "com.example.food/order-9")?.partition == nil, "the partition count not known yet")
        loader.learn(activityPartitions: 48)
        engine.restore("com.example.food/order-9", nil)
        try read()
        #expect(engine.memory(of: "com.example.food/order-9")?.partition == activityPartition)
    }

    @Test("outcomes read before their request wait for it (at most 4, for 10 minutes); one read again takes no other's place; the latest's is kept with it")
    func outcomesWaiting() throws {
        var memory = ActivityMemory()
        func outcome(_ id: String, _ result: PushResult = .delivered, at time: Date = now) -> PushOutcome {
            PushOutcome(requestId: id, activityId: "order-42", result: result, attempts: 1, completedAt: time, bundleId: app.bundleId)
        }
        for index in 0..<4 { memory.record(outcome("r\(index)")) }
        let kept = memory.outcomes.map(\.requestId)
        memory.record(outcome("r3"))
        #expect(memory.outcomes.map(\.requestId).sorted() == kept.sorted())
        memory.record(outcome("r4", .coalesced))
        #expect(memory.outcomes.count == 4 && memory.outcome(of: "r4") == .coalesced && memory.outcome(of: "r0") == nil, "the oldest makes room")
        // Its request read: the outcome is the latest's, the others wait on.
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        var request = try send(engine, delivery(1, "preparing"), partition: 0).requests[0]
        request.requestId = "r4"
        memory.replay(request)
        #expect(memory.latest?.requestId == "r4" && memory.outcome(of: "r4") == .coalesced && memory.outcomes.count == 4)
        #expect(memory.startNeverArrived == false)
        // Ten minutes on, those still waiting are dropped; the latest's stays.
        request.requestId = "r5"
        request.apnsTimestamp += 1
        request.createdAt = now.addingTimeInterval(601)
        memory.record(outcome("r5", .delivered, at: now.addingTimeInterval(602)))
        #expect(memory.outcomes.map(\.requestId) == ["r4", "r5"], "the latest's, and r5 waiting: the others are older than their lifetime")
        memory.replay(request)
        #expect(memory.outcome(of: "r5") == .delivered && memory.outcomes.map(\.requestId) == ["r5"])
    }

    @Test("a restart reads the requests and outcomes from the oldest position the checkpoints name, and from the retention's start unless every partition has one")
    func startPositions() {
        let requests0 = KafkaTopicPartition(topic: "r", partition: 0)
        let requests1 = KafkaTopicPartition(topic: "r", partition: 1)
        let outcomes0 = KafkaTopicPartition(topic: "o", partition: 0)
        let checkpoints: [Int32: [KafkaTopicPartition: Int64]] = [
            0: [requests0: 50, requests1: 20, outcomes0: 9],
            1: [requests0: 40, requests1: 25],
        ]
        #expect(ContentMemoryLoader.startPositions(checkpoints, partitions: [0, 1]) == [requests0: 40, requests1: 20], "o/0 not named by every checkpoint: from the retention's start")
        #expect(ContentMemoryLoader.startPositions(checkpoints, partitions: [0, 1, 2]).isEmpty, "partition 2 has no checkpoint")
        #expect(ContentMemoryLoader.startPositions([:], partitions: []).isEmpty)
    }

    @Test("the changelog's records restore memories, tombstones forget them, checkpoints are collected; a broken record is skipped")
    func applyChangelog() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        var checkpoints: [Int32: [KafkaTopicPartition: Int64]] = [:]
        var memories = 0
        let logger = Logger(label: "test")
        func apply(_ key: String, _ value: [UInt8]?, partition: Int32 = 0) {
            ContentMemoryLoader.apply(
                changelog: KafkaMessage(topic: "m", partition: partition, offset: 0, key: Array(key.utf8), value: value), to: engine,
                checkpoints: &checkpoints, memories: &memories, metrics: ContentMetrics(), logger: logger)
        }
        let memory = ContentMemoryRecord(activity: .init(bundleId: app.bundleId, activityId: "x", partition: 0, lastSequence: 4), writtenAt: now)
        apply("com.example.food/x", try IsletJSON.encode(memory))
        #expect(engine.memory(of: "com.example.food/x")?.lastSequence == 4)
        apply("com.example.food/x", nil)
        #expect(engine.memory(of: "com.example.food/x") == nil)
        let checkpoint = ContentMemoryRecord(
            checkpoint: .init(partition: 1, positions: [.init(topic: "r", partition: 0, offset: 12)]), writtenAt: now)
        apply(ContentMemoryRecord.checkpointKey, try IsletJSON.encode(checkpoint), partition: 1)
        apply("com.example.food/y", Array("{not json".utf8))
        #expect(checkpoints == [1: [KafkaTopicPartition(topic: "r", partition: 0): 12]])
        // A checkpoint's tombstone: that partition has none (the memory is rebuilt from the records).
        apply(ContentMemoryRecord.checkpointKey, nil, partition: 1)
        #expect(checkpoints.isEmpty)
        #expect(memories == 1)
    }

    @Test("a round writes nothing while requests sent are not acknowledged: a memory must not count an event Kafka may still lose")
    func nothingAheadOfKafka() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        // A producer that never reaches a broker: what it is given is never acknowledged.
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: "127.0.0.1:1"), logger: quiet)
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let sender = RequestSender(producer: producer, engine: engine, metrics: ContentMetrics(), logger: quiet)
        sender.own([0])
        guard case .send(let prepared) = try engine.prepare(delivery(1, "preparing"), partition: 0) else {
            Issue.record("nothing to send")
            return
        }
        try await sender.turn { try await sender.enqueue(prepared) {} }
        let writer = ChangelogWriter(
            engine: engine, sender: sender, producer: producer, positions: ReadPositions(), settleTimeout: .milliseconds(200), logger: quiet)
        #expect(await writer.write() == 0)
        #expect(writer.failure?.contains("not all acknowledged") == true)
        #expect(engine.unwrittenCount(partitions: [0]) == 1, "still to be written, in a later round")
        producer.shutdown()
    }

    @Test("an event that scheduled a step is processed once a round wrote the activity's memory with the step, not before; revoked first, it is left to the next owner")
    func scheduledEventWaitsForTheRound() async throws {
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let clock = ManualClock(now)
        let bus = MemoryBus(partitions: ["memory": 2, "requests": 2], now: { clock.date })
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: clock)
        let sender = RequestSender(producer: bus, engine: engine, topic: "requests", metrics: ContentMetrics(), logger: quiet)
        sender.own([0, 1])
        engine.trackChanges(of: [0, 1])
        let writer = ChangelogWriter(engine: engine, sender: sender, producer: bus, positions: ReadPositions(), topic: "memory", logger: quiet)
        var step = delivery(10, "delivered")
        step.at = now.addingTimeInterval(600)
        guard case .schedule(let scheduled) = try engine.prepare(step, partition: 0) else {
            Issue.record("not scheduled")
            return
        }
        engine.commit(scheduled)
        let done = Raised()
        let abandoned = Raised()
        writer.source.afterNextRound(partition: 0, done: { done.raise() }, abandon: { abandoned.raise() })
        #expect(!done.isRaised, "not before the round")
        _ = await writer.write()
        #expect(done.isRaised && !abandoned.isRaised)
        let written = bus.records("memory", partition: 0).compactMap { $0.value.flatMap { try? IsletJSON.decode(ContentMemoryRecord.self, from: $0) } }
        #expect(written.last { $0.activity != nil }?.activity?.steps?.map(\.sequence) == [10], "the round wrote the step")

        // Another step, then the partition is revoked before a round: left to the next owner.
        var other = delivery(11, "delivered", activity: "order-43")
        other.at = now.addingTimeInterval(600)
        guard case .schedule(let second) = try engine.prepare(other, partition: 1) else {
            Issue.record("not scheduled")
            return
        }
        engine.commit(second)
        let secondDone = Raised()
        let secondAbandoned = Raised()
        writer.source.afterNextRound(partition: 1, done: { secondDone.raise() }, abandon: { secondAbandoned.raise() })
        writer.source.abandonAwaiting([1])
        _ = await writer.write()
        #expect(secondAbandoned.isRaised && !secondDone.isRaised)
        // An event that comes to wait while its partition is being revoked is left to the next
        // owner at once (the revocation does not wait for it); assigned again, events wait again.
        let late = Raised()
        writer.source.afterNextRound(partition: 1, done: {}, abandon: { late.raise() })
        #expect(late.isRaised)
        writer.source.reopen([1])
        let again = Raised()
        writer.source.afterNextRound(partition: 1, done: { again.raise() }, abandon: {})
        #expect(!again.isRaised)
        _ = await writer.write()
        #expect(again.isRaised)
    }
}

/// A flag a callback raises.
private final class Raised: Sendable {
    private let raised = Mutex(false)
    func raise() { raised.withLock { $0 = true } }
    var isRaised: Bool { raised.withLock { $0 } }
}
