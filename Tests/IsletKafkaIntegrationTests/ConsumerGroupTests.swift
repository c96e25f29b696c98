import Foundation
import IsletKafka
import IsletTesting
import Synchronization
import Testing

/// What the members of one group did, as seen by the test.
actor GroupLedger {
    private(set) var assignments: [String: Set<KafkaTopicPartition>] = [:]
    /// value → the member whose mark of it was accepted.
    private(set) var marked: [String: String] = [:]
    /// Messages delivered again after a member had marked them processed: must stay empty.
    private(set) var redeliveredAfterMark: [String] = []
    private(set) var deliveries = 0

    func assigned(_ member: String, _ partitions: [KafkaTopicPartition]) {
        assignments[member, default: []].formUnion(partitions)
    }

    func revoked(_ member: String, _ partitions: [KafkaTopicPartition]) {
        assignments[member, default: []].subtract(partitions)
    }

    func delivered(_ value: String) {
        deliveries += 1
        if marked[value] != nil { redeliveredAfterMark.append(value) }
    }

    func markAccepted(_ value: String, by member: String) {
        if marked[value] != nil { redeliveredAfterMark.append(value) }
        marked[value] = member
    }

    var markedCount: Int { marked.count }

    /// Members that currently own at least one partition.
    var activeMembers: Int { assignments.values.filter { !$0.isEmpty }.count }
}

/// Runs one group member until cancelled: records assignments, handles each message (a little
/// work, so that rebalances catch messages in flight) and marks it processed.
func runMember(_ consumer: KafkaConsumer, name: String, ledger: GroupLedger) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await consumer.run() }
        for await event in consumer.events {
            switch event {
            case .partitionsAssigned(let partitions):
                await ledger.assigned(name, partitions)
            case .partitionsRevoked(let partitions):
                await ledger.revoked(name, partitions)
            case .partitionEnd:
                Issue.record("a group member reported a partition end without asking for it")
            case .message(let message):
                let value = String(decoding: message.value ?? [], as: UTF8.self)
                await ledger.delivered(value)
                try? await Task.sleep(for: .microseconds(200))
                if consumer.markProcessed(message) {
                    await ledger.markAccepted(value, by: name)
                }
            }
        }
        try await group.waitForAll()
    }
}

func waitUntil(_ what: String, timeout: Duration = .seconds(60), _ condition: @Sendable () async -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !(await condition()) {
        guard ContinuousClock.now < deadline else { throw TimeoutError(what: what, limit: timeout) }
        try await Task.sleep(for: .milliseconds(50))
    }
}

@Suite("Consumer groups against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(4)))
struct ConsumerGroupTests {
    @Test("two members share the partitions; a third joining moves partitions without losing or re-processing a marked message")
    func thirdMemberJoins() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("group")
        let groupID = uniqueName("g")
        let total = 3_000
        try await createTopic(servers, topic, partitions: 6)
        let ledger = GroupLedger()
        let settings = ["session.timeout.ms": "6000"]
        let first = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let second = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let third = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let producer = try makeProducer(servers)

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await runMember(first, name: "first", ledger: ledger) }
            group.addTask { try await runMember(second, name: "second", ledger: ledger) }
            // Both own partitions, none twice, all six covered.
            try await waitUntil("two members share the six partitions") {
                let owned = await ledger.assignments
                let first = owned["first"] ?? [], second = owned["second"] ?? []
                return !first.isEmpty && !second.isEmpty && first.isDisjoint(with: second) && first.union(second).count == 6
            }

            // A stream of records: the first half before the third member joins, the rest while it does.
            for i in 0..<total / 2 {
                try await producer.send(topic: topic, key: "k\(i)", value: Array("m\(i)".utf8))
            }
            try await waitUntil("the first half is processed") { await ledger.markedCount >= total / 4 }
            group.addTask { try await runMember(third, name: "third", ledger: ledger) }
            for i in total / 2..<total {
                try await producer.send(topic: topic, key: "k\(i)", value: Array("m\(i)".utf8))
            }
            try await waitUntil("three members share the six partitions") {
                let owned = await ledger.assignments.values
                let all = owned.reduce(into: Set<KafkaTopicPartition>()) { $0.formUnion($1) }
                return owned.filter { !$0.isEmpty }.count == 3 && all.count == 6 && owned.map(\.count).reduce(0, +) == 6
            }
            try await waitUntil("every record is processed") { await ledger.markedCount == total }
            for consumer in [first, second, third] { consumer.shutdown() }
            producer.shutdown()
            try await group.waitForAll()
        }

        let marked = await ledger.marked
        #expect(Set(marked.keys) == Set((0..<total).map { "m\($0)" }), "no record lost")
        #expect(await ledger.redeliveredAfterMark == [], "no record processed again after it was marked")
        #expect(Set(marked.values) == ["first", "second", "third"], "all three members did work")
    }

    @Test("a member killed before marking a message processed: the message comes again after a restart, marked ones do not")
    func crashBeforeMark() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("crash")
        let groupID = uniqueName("g")
        try await createTopic(servers, topic, partitions: 1)
        let settings = ["session.timeout.ms": "6000"]
        try await withProducer(try makeProducer(servers)) { producer in
            for value in ["processed", "in-flight", "later"] {
                try await producer.send(topic: topic, key: "k", value: Array(value.utf8))
            }
        }

        // The first instance processes one record, marks it, waits for the auto-commit, takes the
        // next one and dies before marking it.
        let doomed = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let seenByDoomed = try await withTimeout(.seconds(60), "the first instance") {
            try await withThrowingTaskGroup(of: [String]?.self) { group in
                group.addTask { try await doomed.run(); return nil }
                var seen: [String] = []
                for await message in doomed.messages {
                    let value = String(decoding: message.value ?? [], as: UTF8.self)
                    seen.append(value)
                    if value == "processed" {
                        #expect(doomed.markProcessed(message))
                        // Until the auto-commit reached the broker (a fixed sleep was too short on a starved machine).
                        let partition = message.topicPartition
                        let deadline = ContinuousClock.now + .seconds(30)
                        while ((try? await doomed.committedOffsets(for: [partition]))?[partition] ?? nil) != 1 && ContinuousClock.now < deadline {
                            try await Task.sleep(for: .milliseconds(100))
                        }
                    } else {
                        doomed.simulateCrash()
                        break
                    }
                }
                var result: [String]?
                for try await value in group { if let value { result = value } }
                return result ?? seen
            }
        }
        #expect(seenByDoomed == ["processed", "in-flight"])

        // The restarted instance starts after the last marked record.
        let restarted = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let seenAfterRestart = try await withRunning([restarted], limit: .seconds(90), "the restarted instance") {
            var seen: [String] = []
            for await message in restarted.messages {
                seen.append(String(decoding: message.value ?? [], as: UTF8.self))
                restarted.markProcessed(message)
                if seen.count == 2 { break }
            }
            return seen
        }
        #expect(seenAfterRestart == ["in-flight", "later"])
    }

    @Test("a clean close commits what was marked and leaves the group at once")
    func cleanCloseLeavesAtOnce() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("close")
        let groupID = uniqueName("g")
        try await createTopic(servers, topic, partitions: 2)
        try await withProducer(try makeProducer(servers)) { producer in
            for i in 0..<10 { try await producer.send(topic: topic, key: "k\(i)", value: Array("v\(i)".utf8)) }
        }
        // A long session timeout: had the first member not left, the group would wait that long for
        // it before assigning its partitions to the second. (The local broker also holds every join
        // for about half the session timeout, so the threshold below sits between the two.)
        let settings = ["session.timeout.ms": "30000", "auto.commit.interval.ms": "60000"]
        let first = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        try await withTimeout(.seconds(60), "the first member") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await first.run() }
                var count = 0
                for await message in first.messages {
                    first.markProcessed(message)
                    count += 1
                    if count == 10 { break }  // leaving the loop closes the consumer
                }
                try await group.waitForAll()
            }
        }
        let second = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let start = ContinuousClock.now
        let (assigned, committed) = try await withRunning([second], "the second member's assignment") {
            for await event in second.events {
                if case .partitionsAssigned(let partitions) = event {
                    return (partitions, try await second.committedOffsets(for: partitions))
                }
            }
            return ([], [:])
        }
        #expect(assigned.count == 2)
        #expect(ContinuousClock.now - start < .seconds(25), "the second member did not wait for the first one's session to expire")
        #expect(committed.values.compactMap { $0 }.reduce(0, +) == 10, "the marks were committed at close")
    }

    @Test("a member whose loop stalls with a full buffer still answers rebalances, and nothing is lost")
    func stalledLoopStillRebalances() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("stall")
        let groupID = uniqueName("g")
        let total = 400
        try await createTopic(servers, topic, partitions: 4)
        try await withProducer(try makeProducer(servers)) { producer in
            for i in 0..<total { try await producer.send(topic: topic, key: "k\(i)", value: Array("m\(i)".utf8)) }
        }
        let settings = ["session.timeout.ms": "6000"]
        // A buffer of 20 records: the stalled member fills it at once.
        let stalled = try KafkaConsumer(
            configuration: .init(
                bootstrapServers: servers, groupID: groupID, topics: [topic], batchSize: 10, bufferCapacity: 20, settings: settings),
            logger: testLogger)
        let joiner = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let ledger = GroupLedger()
        let gate = AsyncStream<Void>.makeStream()

        try await withRunning([stalled], limit: .seconds(120), "the group") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var first = true
                    for await event in stalled.events {
                        switch event {
                        case .partitionsAssigned(let partitions): await ledger.assigned("stalled", partitions)
                        case .partitionsRevoked(let partitions): await ledger.revoked("stalled", partitions)
                        case .partitionEnd: Issue.record("a group member reported a partition end without asking for it")
                        case .message(let message):
                            // Delivered now, whatever happens while the loop stalls: recording it
                            // after the stall would count it as delivered after the joiner marked it.
                            let value = String(decoding: message.value ?? [], as: UTF8.self)
                            await ledger.delivered(value)
                            if first {
                                first = false
                                for await _ in gate.stream {}  // the loop stalls here until the gate opens
                            }
                            if stalled.markProcessed(message) { await ledger.markAccepted(value, by: "stalled") }
                        }
                        if await ledger.markedCount == total { break }
                    }
                }
                try await waitUntil("the stalled member owns the partitions") { await ledger.activeMembers == 1 }
                // While the first loop is stuck, a second member joins: the rebalance must complete.
                group.addTask { try await runMember(joiner, name: "joiner", ledger: ledger) }
                try await waitUntil("the joiner gets partitions while the other loop is stalled", timeout: .seconds(40)) {
                    await !(ledger.assignments["joiner"] ?? []).isEmpty
                }
                // The joiner works while the stalled loop still holds a message, perhaps of a
                // partition that moved: that one's mark must then be refused.
                try await waitUntil("the joiner processes records while the other loop is stalled") {
                    await ledger.marked.values.contains("joiner")
                }
                gate.continuation.finish()
                try await waitUntil("every record is processed") { await ledger.markedCount == total }
                joiner.shutdown()
                try await group.waitForAll()
            }
        }
        let redelivered = await ledger.redeliveredAfterMark
        #expect(redelivered == [], "no record processed again after it was marked: \(redelivered)")
        #expect(Set(await ledger.marked.keys) == Set((0..<total).map { "m\($0)" }))
    }

    @Test(
        "a member joins while work is in flight: the revoked partitions' work finishes and is committed before the new member reads them, so nothing is processed twice (eager: all four revoked; cooperative: only the two that move)",
        arguments: ["range", "cooperative-sticky"])
    func revocationWaitsForWorkInFlight(strategy: String) async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("inflight")
        let groupID = uniqueName("g")
        let total = 400
        try await createTopic(servers, topic, partitions: 4)
        let settings = ["session.timeout.ms": "6000", "partition.assignment.strategy": strategy]
        let ledger = GroupLedger()
        let first = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let second = try makeConsumer(servers, group: groupID, topics: [topic], settings: settings)
        let producer = try makeProducer(servers)
        // The first member's work runs concurrently (as the dispatcher's pushes do) and lasts
        // until half a second after a revocation began (at most 20 s): work is in flight when the
        // partitions move. Records are marked in offset order as they finish.
        let tracker = OffsetTracker()
        let revocations = RevocationLog()
        first.onRevocation(timeout: .seconds(20)) { partitions in
            tracker.beginRevoking(partitions)
            revocations.started(partitions, openAtStart: tracker.isOpen(in: Set(partitions)))
            revocations.finished(await tracker.waitUntilClosed(partitions, timeout: .seconds(15)))
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            group.addTask { try await first.run() }
            group.addTask {
                try await withThrowingDiscardingTaskGroup { work in
                    for await event in first.events {
                        switch event {
                        case .partitionsAssigned(let partitions): await ledger.assigned("first", partitions)
                        case .partitionsRevoked(let partitions):
                            await ledger.revoked("first", partitions)
                            tracker.revoke(partitions)
                        case .partitionEnd: break
                        case .message(let message):
                            guard tracker.begin(message) else { continue }
                            let value = String(decoding: message.value ?? [], as: UTF8.self)
                            await ledger.delivered(value)
                            work.addTask {
                                let deadline = ContinuousClock.now + .seconds(20)
                                while revocations.entries.isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
                                try await Task.sleep(for: .milliseconds(500))
                                await ledger.markAccepted(value, by: "first")
                                if let release = tracker.complete(message) { first.markProcessed(release) }
                            }
                        }
                    }
                }
            }
            try await waitUntil("the first member owns the four partitions") { await ledger.assignments["first"]?.count == 4 }
            for i in 0..<total / 2 { try await producer.send(topic: topic, key: "k\(i)", value: Array("m\(i)".utf8)) }
            try await waitUntil("the first half is in flight") { await ledger.deliveries >= total / 2 }
            // The second member joins while all of them are in flight.
            group.addTask { try await runMember(second, name: "second", ledger: ledger) }
            try await waitUntil("the second member gets partitions") { await !(ledger.assignments["second"] ?? []).isEmpty }
            for i in total / 2..<total { try await producer.send(topic: topic, key: "k\(i)", value: Array("m\(i)".utf8)) }
            try await waitUntil("every record is processed") { await ledger.markedCount == total }
            for consumer in [first, second] { consumer.shutdown() }
            producer.shutdown()
            try await group.waitForAll()
        }

        let redelivered = await ledger.redeliveredAfterMark
        #expect(redelivered == [], "processed twice: \(redelivered.count) records")
        #expect(await ledger.deliveries == total, "each record delivered once")
        let log = revocations.entries
        let moved = log.first
        #expect(moved?.partitions.count == (strategy == "range" ? 4 : 2), "\(strategy): \(log)")
        #expect(moved?.openAtStart == true, "the revocation found work in flight (the test exercised the wait)")
        #expect(moved?.finished == true, "and the work finished within the timeout")
        #expect(Set(await ledger.marked.values) == ["first", "second"])
    }
}

/// What a member's revocation handler saw.
final class RevocationLog: Sendable {
    struct Entry: Sendable, CustomStringConvertible {
        var partitions: [KafkaTopicPartition]
        var openAtStart: Bool
        var finished: Bool?
        var description: String { "\(partitions.map(\.partition)) open: \(openAtStart) finished: \(finished.map(String.init) ?? "-")" }
    }
    private let state = Mutex<[Entry]>([])
    var entries: [Entry] { state.withLock { $0 } }
    func started(_ partitions: [KafkaTopicPartition], openAtStart: Bool) {
        state.withLock { $0.append(Entry(partitions: partitions, openAtStart: openAtStart)) }
    }
    func finished(_ finished: Bool) { state.withLock { $0[$0.count - 1].finished = finished } }
}
