import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing

@testable import ContentService

/// content-service's Kafka side — ``ContentServiceLoop`` with its lanes, ``RequestSender``, the
/// memory loader and the changelog writer, the code that runs on Kafka — on the in-memory cluster
/// (``MemoryBus``), through the transitions of a deployment: a second instance joining while
/// requests wait for Kafka's acknowledgement, an eager rebalance, SIGTERM, the owner killed. After each, the ledger on the requests topic: every event turned into its
/// request once, each activity's content sequences rising without a gap or a repeat.
@Suite("content-service's Kafka side on the in-memory bus", .timeLimit(.minutes(1)))
struct ContentLoopBusTests {
    static let events = "events"
    static let requests = "requests"
    static let outcomes = "outcomes"
    static let memory = "memory"
    static let group = "content-service"

    final class Cluster: Sendable {
        let bus = MemoryBus(partitions: [
            ContentLoopBusTests.events: 4, ContentLoopBusTests.requests: 4, ContentLoopBusTests.outcomes: 4, ContentLoopBusTests.memory: 4,
        ])

        /// Writes event `sequence` of `activity` (an update of a DeliveryAttributes activity).
        func post(_ activity: String, _ sequence: Int64) async throws {
            var update = event(
                "DeliveryAttributes", sequence: sequence, ["status": .string("preparing"), "orderId": .string(activity)])
            update.activityId = activity
            update.eventId = "\(activity)-e\(sequence)"
            update.occurredAt = Date()
            try await bus.send(update, to: ContentLoopBusTests.events)
        }

        var requests: [PushRequest] {
            bus.records(ContentLoopBusTests.requests).compactMap { $0.value.flatMap { try? IsletJSON.decode(PushRequest.self, from: $0) } }
        }

        /// Waits until each of `activities` has a request for event `through` (at most 20 s).
        func waitForRequests(_ activities: [String], through sequence: Int64) async {
            for _ in 0..<2_000 {
                let made = Set(requests.compactMap(\.sourceEventId))
                if activities.allSatisfy({ made.contains("\($0)-e\(sequence)") }) { return }
                try? await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("no request for event \(sequence) of some of \(activities)")
        }

        /// Each event made one request, and each activity's content sequences and APNs timestamps
        /// rise one by one from 1 (none repeated, none skipped), their APNs timestamps never lower than the one before.
        func expectLedger(_ activities: [String], events: Int64, sourceLocation: SourceLocation = #_sourceLocation) {
            let requests = self.requests
            for activity in activities {
                let mine = requests.filter { $0.activityId == activity }
                #expect(mine.map(\.sourceEventId) == (1...events).map { "\(activity)-e\($0)" }, "\(activity)", sourceLocation: sourceLocation)
                #expect(mine.map(\.contentSequence) == Array(1...events), "\(activity)", sourceLocation: sourceLocation)
                #expect(zip(mine, mine.dropFirst()).allSatisfy { $0.apnsTimestamp <= $1.apnsTimestamp }, "\(activity)", sourceLocation: sourceLocation)
            }
        }
    }

    /// One content-service process on the cluster: the loop, the memory loader and the changelog
    /// writer as `ContentServiceApp` assembles them, with the bus in place of Kafka.
    final class Process: Sendable {
        let engine: ContentEngine
        private let process: MemoryBusProcess
        var consumer: MemoryGroupMember { process.consumer }

        init(_ cluster: Cluster, rebalance: MemoryBus.RebalanceProtocol = .eager, autoCommit: Bool = true) throws {
            let bus = cluster.bus
            var logger = Logger(label: "content-service")
            logger.logLevel = .critical
            engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole())
            let sender = RequestSender(producer: bus, engine: engine, topic: ContentLoopBusTests.requests, metrics: ContentMetrics(), logger: logger)
            let loader = ContentMemoryLoader(
                engine: engine, requestsTopic: ContentLoopBusTests.requests, outcomesTopic: ContentLoopBusTests.outcomes,
                changelogTopic: ContentLoopBusTests.memory, since: Date().addingTimeInterval(-3_600), ownWrites: sender.writer, metrics: sender.metrics,
                logger: logger,
                readEnds: { topics in bus.ends(topics) },
                makeReplica: { topics, since, startAt, partitions in bus.replica(topics, partitions: partitions, since: since, startAt: startAt) })
            let changelog = ChangelogWriter(
                engine: engine, sender: sender, producer: bus, positions: loader.positions, topic: ContentLoopBusTests.memory, interval: .seconds(1),
                logger: logger)
            let consumer = bus.member(group: ContentLoopBusTests.group, topics: [ContentLoopBusTests.events], rebalance: rebalance, autoCommit: autoCommit)
            let loop = ContentServiceLoop(
                consumer: consumer,
                deadLetters: DeadLetterWriter(producer: bus, consumer: consumer, service: "content-service", logger: logger, topic: "dead-letters"),
                engine: engine, sender: sender, changelog: changelog, memory: loader, revocationTimeout: .seconds(5), workers: 4, logger: logger)
            process = MemoryBusProcess(consumer: consumer, services: [loader, changelog, loop], logger: logger)
        }

        /// SIGTERM: its events under way finish, then it commits and leaves.
        func stop() async { await process.stop() }

        /// kill -9: the member is dead to the group (nothing committed) and the process stops.
        func kill() async { await process.kill() }
    }


    static let activities = (0..<12).map { "order-\($0)" }

    @Test("events over four partitions: one request each, in sequence, and the events' offsets committed past them")
    func turnsEventsIntoRequests() async throws {
        let cluster = Cluster()
        let process = try Process(cluster)
        for sequence in Int64(1)...3 { for activity in Self.activities { try await cluster.post(activity, sequence) } }
        await cluster.waitForRequests(Self.activities, through: 3)
        cluster.expectLedger(Self.activities, events: 3)
        try await eventually("committed") {
            (Int32(0)..<4).allSatisfy {
                cluster.bus.committed(group: Self.group, topic: Self.events, partition: $0) == Int64(cluster.bus.records(Self.events, partition: $0).count)
            }
        }
        await process.stop()
    }

    @Test(
        "a second instance joins while requests wait for Kafka's acknowledgement (eager and cooperative): the first one's revocation waits for them, the memories of the activities that move are restored by their new owner, and each event makes one request, in sequence",
        arguments: [MemoryBus.RebalanceProtocol.eager, .cooperative])
    func handOver(_ rebalance: MemoryBus.RebalanceProtocol) async throws {
        let cluster = Cluster()
        let first = try Process(cluster, rebalance: rebalance)
        for activity in Self.activities { try await cluster.post(activity, 1) }
        await cluster.waitForRequests(Self.activities, through: 1)
        // Kafka holds the next requests; a second instance joins meanwhile.
        cluster.bus.failProduces { $0 == Self.requests ? .hold : nil }
        for activity in Self.activities { try await cluster.post(activity, 2) }
        try await eventually("requests held") { cluster.bus.heldProduces > 0 }
        let second = try Process(cluster, rebalance: rebalance)
        try await eventually("the first one's revocation waits for its requests") { !cluster.bus.revoking(group: Self.group).isEmpty }
        cluster.bus.failProduces(nil)
        cluster.bus.releaseHeldProduces()
        try await eventually("two partitions each") {
            let assignment = cluster.bus.assignment(group: Self.group)
            return assignment.count == 2 && assignment.values.allSatisfy { $0.count == 2 }
        }
        for activity in Self.activities { try await cluster.post(activity, 3) }
        await cluster.waitForRequests(Self.activities, through: 3)
        cluster.expectLedger(Self.activities, events: 3)
        // The first instance keeps no memory of the activities that went to the second (it forgets
        // them at the rebalance's assignment, empty for it under the cooperative protocol): kept,
        // they would be stale when their partitions come back.
        let seconds = Set(cluster.bus.assignment(group: Self.group)[second.consumer.name + ".1"]?.map(\.partition) ?? [])
        let moved = Dictionary(cluster.bus.records(Self.requests).compactMap { record in record.keyString.map { ($0, record.partition) } }) { a, _ in a }
            .filter { seconds.contains($0.value) }.map(\.key)
        #expect(!moved.isEmpty)
        try await eventually("the first forgot them") { moved.allSatisfy { first.engine.memory(of: $0) == nil } }
        await first.stop()
        await second.stop()
    }

    @Test("an eager rebalance revokes every partition and assigns them again: the memories of those that come back are kept, those that moved are restored by their new owner")
    func eagerRebalance() async throws {
        let cluster = Cluster()
        let first = try Process(cluster, rebalance: .eager)
        for activity in Self.activities { try await cluster.post(activity, 1) }
        await cluster.waitForRequests(Self.activities, through: 1)
        let second = try Process(cluster, rebalance: .eager)
        try await eventually("two partitions each") {
            let assignment = cluster.bus.assignment(group: Self.group)
            return assignment.count == 2 && assignment.values.allSatisfy { $0.count == 2 }
        }
        for sequence in Int64(2)...3 { for activity in Self.activities { try await cluster.post(activity, sequence) } }
        await cluster.waitForRequests(Self.activities, through: 3)
        cluster.expectLedger(Self.activities, events: 3)
        await first.stop()
        await second.stop()
    }

    @Test("SIGTERM while requests wait for Kafka's acknowledgement: the close's revocation waits for them, and every event is committed before the instance leaves")
    func gracefulStopCommits() async throws {
        let cluster = Cluster()
        let process = try Process(cluster, autoCommit: false)
        for activity in Self.activities { try await cluster.post(activity, 1) }
        await cluster.waitForRequests(Self.activities, through: 1)
        cluster.bus.failProduces { $0 == Self.requests ? .hold : nil }
        for activity in Self.activities { try await cluster.post(activity, 2) }
        try await eventually("requests held") { cluster.bus.heldProduces > 0 }
        let stopping = Task { await process.stop() }
        // Released whatever happens: a failed wait must not leave the stop waiting for them.
        defer {
            cluster.bus.failProduces(nil)
            cluster.bus.releaseHeldProduces()
        }
        try await eventually("the close's revocation waits for them") { !cluster.bus.revoking(group: Self.group).isEmpty }
        cluster.bus.failProduces(nil)
        cluster.bus.releaseHeldProduces()
        await stopping.value
        for partition in Int32(0)..<4 {
            #expect(
                cluster.bus.committed(group: Self.group, topic: Self.events, partition: partition)
                    == Int64(cluster.bus.records(Self.events, partition: partition).count), "partition \(partition)")
        }
        cluster.expectLedger(Self.activities, events: 2)
    }

    @Test("kill -9 with nothing committed: the next owner reads every event again, its memory restored from the requests written, and makes no request twice")
    func killedOwner() async throws {
        let cluster = Cluster()
        let first = try Process(cluster, autoCommit: false)
        for sequence in Int64(1)...2 { for activity in Self.activities { try await cluster.post(activity, sequence) } }
        await cluster.waitForRequests(Self.activities, through: 2)
        await first.kill()
        let second = try Process(cluster, autoCommit: false)
        await first.consumer.expireSession()
        try await eventually("the second holds every partition") { cluster.bus.assignment(group: Self.group)[second.consumer.name + ".1"]?.count == 4 }
        for activity in Self.activities { try await cluster.post(activity, 3) }
        await cluster.waitForRequests(Self.activities, through: 3)
        cluster.expectLedger(Self.activities, events: 3)
        await second.stop()
    }
}
