import Foundation
import IsletKafka
import IsletTesting
import IsletMessages
import Synchronization
import Testing

/// The in-memory cluster the services' Kafka sides are tested on: it must behave as Kafka does
/// where they rely on it (partitions by key, commits, rebalances, losses), or those tests prove
/// nothing.
@Suite("The in-memory bus", .timeLimit(.minutes(1)))
struct MemoryBusTests {
    /// Reads a member's events into a log, as a service's loop does.
    final class Log: Sendable {
        final class Events: Sendable { let list = Mutex<[KafkaConsumerEvent]>([]) }
        let events = Events()
        let task: Task<Void, Never>

        init(_ member: MemoryGroupMember, marking: Bool = true) {
            let events = self.events
            task = Task {
                for await event in member.events {
                    events.list.withLock { $0.append(event) }
                    if marking, case .message(let message) = event { member.markProcessed(message) }
                }
            }
        }

        var offsets: [Int64] { events.list.withLock { $0.compactMap { if case .message(let m) = $0 { m.offset } else { nil } } } }
        var assigned: [[Int32]] { events.list.withLock { $0.compactMap { if case .partitionsAssigned(let p) = $0 { p.map(\.partition) } else { nil } } } }
        var revoked: [[Int32]] { events.list.withLock { $0.compactMap { if case .partitionsRevoked(let p) = $0 { p.map(\.partition) } else { nil } } } }
    }


    @Test("a keyed record goes to the partition Islet's producers put it in; a replica from a time reads from the first record at or after it, and reports each partition's end")
    func partitionsAndReplicas() async throws {
        let bus = MemoryBus(partitions: ["t": 4])
        let key = MessageKey.activity(bundleId: "com.example.food", activityId: "order-1")
        let report = try await bus.send(topic: "t", key: key, value: [1])
        #expect(report.partition == KafkaPartitioner.partition(ofKey: key, partitions: 4))
        try await Task.sleep(for: .milliseconds(5))
        let cut = Date()
        try await Task.sleep(for: .milliseconds(5))
        try await bus.send(topic: "t", key: key, value: [2])
        let replica = bus.replica(["t"], partitions: [report.partition], since: cut)
        var iterator = replica.events.makeAsyncIterator()
        guard case .partitionsAssigned(let assigned)? = await iterator.next() else { Issue.record("no assignment"); return }
        #expect(assigned.map(\.partition) == [report.partition])
        guard case .message(let message)? = await iterator.next() else { Issue.record("no record"); return }
        #expect(message.value == [2] && message.offset == 1)
        guard case .partitionEnd? = await iterator.next() else { Issue.record("no end"); return }
        replica.shutdown()
        #expect(await iterator.next() == nil)
    }

    @Test("refused produces throw and write nothing; held ones are written when released")
    func produceFaults() async throws {
        let bus = MemoryBus()
        bus.failProduces { $0 == "refused" ? .refuse(KafkaError(code: .consumer, message: "no")) : $0 == "held" ? .hold : nil }
        await #expect(throws: KafkaError.self) { try await bus.send(topic: "refused", key: nil, value: [1]) }
        #expect(bus.records("refused").isEmpty)
        async let held = bus.send(topic: "held", key: nil, value: [1])
        try await eventually("held") { bus.heldProduces == 1 }
        #expect(bus.records("held").isEmpty)
        bus.releaseHeldProduces()
        #expect(try await held.offset == 0)
        #expect(bus.records("held").count == 1)
    }

    @Test("records handed over one after the other are written in that order, also behind held ones, and their delivery reports come in that order")
    func produceOrder() async throws {
        let bus = MemoryBus()
        let reports = Log.Events()
        let report: @Sendable (Int) -> @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void = { index in
            { _ in reports.list.withLock { $0.append(.partitionEnd(KafkaTopicPartition(topic: "\(index)", partition: 0))) } }
        }
        try bus.produce(topic: "t", key: nil, value: [0], headers: [], partition: nil, onDelivery: report(0))
        bus.failProduces { $0 == "t" ? .hold : nil }
        try bus.produce(topic: "t", key: nil, value: [1], headers: [], partition: nil, onDelivery: report(1))
        bus.failProduces(nil)
        try bus.produce(topic: "t", key: nil, value: [2], headers: [], partition: nil, onDelivery: report(2))
        try bus.produce(topic: "other", key: nil, value: [9], headers: [], partition: nil, onDelivery: report(9))
        #expect(bus.records("t").map(\.value) == [[0]] && bus.records("other").count == 1, "the record behind the held one waits; another topic's does not")
        bus.releaseHeldProduces()
        #expect(bus.records("t").map(\.value) == [[0], [1], [2]])
        try await eventually("every report") { reports.list.withLock { $0.count } == 4 }
        let order = reports.list.withLock { $0.compactMap { if case .partitionEnd(let p) = $0 { p.topic } else { nil } } }
        #expect(order.filter { $0 != "9" } == ["0", "1", "2"])
    }

    @Test("cooperative: a second member takes half the partitions, only those are revoked from the first, through its handler, and what it marked is committed before the new owner reads from there")
    func cooperativeJoin() async throws {
        let bus = MemoryBus(partitions: ["t": 4])
        for partition in Int32(0)..<4 { try await bus.send(topic: "t", key: nil, value: [1], partition: partition) }
        let first = bus.member(group: "g", topics: ["t"], rebalance: .cooperative, autoCommit: false)
        let handled = Mutex<[[Int32]]>([])
        first.onRevocation(timeout: .seconds(5)) { partitions in handled.withLock { $0.append(partitions.map(\.partition)) } }
        let firstLog = Log(first)
        let firstRun = Task { try await first.run() }
        try await eventually("every record read") { firstLog.offsets.count == 4 }
        let second = bus.member(group: "g", topics: ["t"], rebalance: .cooperative, autoCommit: false)
        let secondLog = Log(second)
        let secondRun = Task { try await second.run() }
        try await eventually("two partitions each, told") {
            bus.assignment(group: "g").values.map(\.count) == [2, 2] && !secondLog.assigned.isEmpty && !firstLog.revoked.isEmpty
                && firstLog.assigned.count == 2
        }
        #expect(firstLog.assigned == [[0, 1, 2, 3], []], "the rebalance ends with an assignment for every member, empty for the first")
        #expect(handled.withLock { $0 } == [[2, 3]] && firstLog.revoked == [[2, 3]], "only the partitions that moved")
        #expect(secondLog.assigned == [[2, 3]])
        // The first member's marks were committed at the revocation: the second reads on from there.
        try await bus.send(topic: "t", key: nil, value: [2], partition: 2)
        try await eventually("the second reads the new record, not the old one again") { secondLog.offsets == [1] }
        #expect(bus.committed(group: "g", topic: "t", partition: 2) == 1)
        #expect(bus.committed(group: "g", topic: "t", partition: 0) == nil, "not committed yet (no auto-commit)")
        first.shutdown()
        await first.left()
        #expect(bus.committed(group: "g", topic: "t", partition: 0) == 1, "committed at the close")
        try await bus.send(topic: "t", key: nil, value: [2], partition: 0)
        try await eventually("the second holds all, and reads on from the first's commit") {
            bus.assignment(group: "g")[second.name + ".1"]?.count == 4 && secondLog.offsets == [1, 1]
        }
        second.shutdown()
        _ = try await (firstRun.value, secondRun.value)
    }

    @Test("eager: every partition of every member is revoked, then assigned again — a record read under the earlier assignment is no longer current and its mark is refused")
    func eagerJoin() async throws {
        let bus = MemoryBus(partitions: ["t": 2])
        let first = bus.member(group: "g", topics: ["t"], rebalance: .eager)
        let held = Mutex<KafkaMessage?>(nil)
        let firstRun = Task { try await first.run() }
        let reader = Task {
            for await event in first.events { if case .message(let message) = event { held.withLock { $0 = message } } }
        }
        try await bus.send(topic: "t", key: nil, value: [1], partition: 0)
        try await eventually("read") { held.withLock { $0 } != nil }
        let message = held.withLock { $0! }
        #expect(first.isCurrent(message))
        let second = bus.member(group: "g", topics: ["t"], rebalance: .eager)
        let secondRun = Task { try await second.run() }
        try await eventually("one partition each") { bus.assignment(group: "g").values.map(\.count) == [1, 1] }
        #expect(bus.assignment(group: "g")[first.name + ".1"] == [KafkaTopicPartition(topic: "t", partition: 0)], "partition 0 given back")
        #expect(!first.isCurrent(message), "read under the assignment before the rebalance")
        #expect(!first.markProcessed(message))
        first.shutdown()
        second.shutdown()
        _ = try await (firstRun.value, secondRun.value)
        reader.cancel()
    }

    @Test("kill -9: nothing committed, the partitions stay with the dead member until its session expires; a running member whose session expires is told they are lost, then joins again")
    func crashAndLoss() async throws {
        let bus = MemoryBus(partitions: ["t": 2])
        try await bus.send(topic: "t", key: nil, value: [1], partition: 0)
        let first = bus.member(group: "g", topics: ["t"], rebalance: .cooperative, autoCommit: false)
        let firstLog = Log(first)
        let firstRun = Task { try await first.run() }
        try await eventually("read") { firstLog.offsets == [0] }
        let second = bus.member(group: "g", topics: ["t"], rebalance: .cooperative, autoCommit: false)
        let lost = Mutex<[Int32]>([])
        second.onLoss { partitions in lost.withLock { $0 += partitions.map(\.partition) } }
        let secondLog = Log(second)
        let secondRun = Task { try await second.run() }
        try await eventually("one each, told") { bus.assignment(group: "g").values.map(\.count) == [1, 1] && !secondLog.assigned.isEmpty }
        first.crash()
        _ = try await firstRun.value
        try await Task.sleep(for: .milliseconds(20))
        #expect(bus.assignment(group: "g")[first.name + ".1"] == [KafkaTopicPartition(topic: "t", partition: 0)], "held until the session expires")
        await first.expireSession()
        try await eventually("the second holds both") { bus.assignment(group: "g")[second.name + ".1"]?.count == 2 }
        try await eventually("record 0 read again: the dead member committed nothing") { secondLog.offsets == [0] }
        await second.expireSession()
        #expect(lost.withLock { $0 } == [0, 1])
        try await eventually("back as a new member, record 0 read again (nothing was committed)") {
            bus.assignment(group: "g")[second.name + ".2"]?.count == 2 && secondLog.offsets == [0, 0]
        }
        #expect(secondLog.revoked == [[0, 1]])
        second.shutdown()
        _ = try await secondRun.value
    }

    @Test("a member killed while its revocation handler runs commits nothing and keeps those partitions until its session expires")
    func killedDuringRevocation() async throws {
        let bus = MemoryBus(partitions: ["t": 2])
        try await bus.send(topic: "t", key: nil, value: [1], partition: 1)
        let first = bus.member(group: "g", topics: ["t"], rebalance: .cooperative, autoCommit: false)
        let release = Atomic<Bool>(false)
        first.onRevocation(timeout: .seconds(10)) { _ in
            while !release.load(ordering: .relaxed) { try? await Task.sleep(for: .milliseconds(5)) }
        }
        let firstLog = Log(first)
        let firstRun = Task { try await first.run() }
        try await eventually("read and marked") { firstLog.offsets == [0] }
        let second = bus.member(group: "g", topics: ["t"], rebalance: .cooperative)
        let secondRun = Task { try await second.run() }
        try await eventually("the first revoking a partition") { !bus.revoking(group: "g").isEmpty }
        first.crash()
        release.store(true, ordering: .relaxed)
        _ = try await firstRun.value
        try await Task.sleep(for: .milliseconds(50))
        #expect(bus.assignment(group: "g")[first.name + ".1"]?.count == 2, "the dead member keeps them")
        #expect(bus.committed(group: "g", topic: "t", partition: 1) == nil, "nothing committed")
        await first.expireSession()
        try await eventually("the second holds both") { bus.assignment(group: "g")[second.name + ".1"]?.count == 2 }
        second.shutdown()
        _ = try await secondRun.value
    }
}
