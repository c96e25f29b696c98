import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing

@testable import APNsDispatcher

/// The dispatcher's Kafka side — ``DispatcherService`` with its ticket book, token loader and
/// recent-outcome reads, the code that runs on Kafka — on the in-memory cluster (``MemoryBus``),
/// through each transition a partition goes through in a deployment: assigned, revoked with pushes
/// in flight (cooperative and eager), given back to the same member, lost with its session, its
/// owner killed, its outcome refused by Kafka. After each, the ledger: every request one final
/// outcome, nothing sent twice.
@Suite("The dispatcher's Kafka side on the in-memory bus", .timeLimit(.minutes(1)))
struct DispatcherServiceTests {
    static let requests = "requests"
    static let outcomes = "outcomes"
    static let tokens = "tokens"
    static let bundleId = "com.example.food"

    /// The cluster, APNs and the requests' ledger of one test.
    final class Cluster: Sendable {
        let bus = MemoryBus(partitions: [DispatcherServiceTests.requests: 4, DispatcherServiceTests.outcomes: 4, DispatcherServiceTests.tokens: 4])
        let sender = ScriptedSender()

        /// An update token for `activity`, on the tokens topic.
        func register(_ activity: String, token: String) async throws {
            let now = Date()
            try await bus.send(
                TokenRecord(
                    kind: .update, activityId: activity, userId: "u", token: token, app: AppTarget(bundleId: DispatcherServiceTests.bundleId, environment: .production),
                    attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, activityStartedAt: now,
                    registeredAt: now, updatedAt: now),
                to: DispatcherServiceTests.tokens)
        }

        /// A device's push-to-start token, on the tokens topic: its key.
        func registerPushToStart(token: String) async throws -> String {
            let now = Date()
            let record = TokenRecord(
                kind: .pushToStart, deviceId: "device-\(token.prefix(6))", userId: "u", token: token,
                app: AppTarget(bundleId: DispatcherServiceTests.bundleId, environment: .production), attributesType: "DeliveryAttributes",
                frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now)
            try await bus.send(record, to: DispatcherServiceTests.tokens)
            return record.key!
        }

        /// Writes an update of `activity` to the requests topic.
        @discardableResult
        func update(_ activity: String, sequence: Int64 = 1) async throws -> PushRequest {
            let request = PushRequest(
                requestId: UUID().uuidString.lowercased(), activityId: activity, event: .update,
                app: AppTarget(bundleId: DispatcherServiceTests.bundleId, environment: .production), attributesType: "DeliveryAttributes",
                payload: payload(extra: #","sequence":\#(sequence)"#), priority: 5, urgency: .routine, supersedable: false, alerting: false,
                apnsTimestamp: 1_795_000_000 + sequence, contentSequence: sequence, createdAt: Date())
            try await bus.send(request, to: DispatcherServiceTests.requests)
            return request
        }

        /// Writes a push-to-start to the device's token `key`.
        @discardableResult
        func pushToStart(key: String, activity: String) async throws -> PushRequest {
            var request = PushRequest(
                requestId: UUID().uuidString.lowercased(), activityId: nil, event: .start,
                app: AppTarget(bundleId: DispatcherServiceTests.bundleId, environment: .production), attributesType: "DeliveryAttributes",
                payload: payload(event: "start", extra: #","sequence":1"#), priority: 10, urgency: .routine, supersedable: false, alerting: false,
                apnsTimestamp: 1_795_000_001, contentSequence: 1, createdAt: Date())
            request.pushToStartKey = key
            request.sourceActivityId = activity
            try await bus.send(request, to: DispatcherServiceTests.requests)
            return request
        }

        /// The outcomes on the topic, in order.
        var outcomes: [PushOutcome] {
            bus.records(DispatcherServiceTests.outcomes).compactMap { $0.value.flatMap { try? IsletJSON.decode(PushOutcome.self, from: $0) } }
        }

        /// The final outcomes of each request.
        var finals: [String: [PushResult]] {
            outcomes.filter(\.result.isFinal).reduce(into: [:]) { $0[$1.requestId, default: []].append($1.result) }
        }

        /// How many times each request went to APNs.
        var sends: [String: Int] { sender.sent.reduce(into: [:]) { $0[$1.apnsID, default: 0] += 1 } }

        /// Waits until `requests` all have a final outcome (at most 20 s).
        func waitForFinals(_ requests: [PushRequest]) async {
            let ids = Set(requests.map(\.requestId))
            for _ in 0..<2_000 {
                if ids.isSubset(of: Set(finals.keys)) { return }
                try? await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("no final outcome for \(ids.subtracting(finals.keys).count) of \(ids.count) requests")
        }

        /// Every request exactly one final outcome, and went to APNs at most once.
        func expectOnce(_ requests: [PushRequest], sourceLocation: SourceLocation = #_sourceLocation) {
            let finals = self.finals
            let sends = self.sends
            for request in requests {
                #expect(finals[request.requestId]?.count == 1, "\(request.requestId): \(finals[request.requestId] ?? [])", sourceLocation: sourceLocation)
                #expect((sends[request.requestId] ?? 0) <= 1, "\(request.requestId) sent \(sends[request.requestId] ?? 0) times", sourceLocation: sourceLocation)
            }
        }
    }

    /// APNs as one dispatcher process reaches it: after a kill -9 nothing it sent is answered.
    final class ProcessSender: APNsSending {
        let base: ScriptedSender
        let killed = Atomic<Bool>(false)
        init(_ base: ScriptedSender) { self.base = base }

        func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer {
            if killed.load(ordering: .relaxed) { try await Task.sleep(for: .seconds(3_600)) }
            let answer = try await base.send(push, teamID: teamID, environment: environment)
            if killed.load(ordering: .relaxed) { try await Task.sleep(for: .seconds(3_600)) }
            return answer
        }
        func renewProviderToken(teamID: String) {}
        func reconnect(teamID: String) {}
        func createChannel(bundleID: String, storagePolicy: APNsStoragePolicy, teamID: String, environment: APNsEnvironment) async throws -> String {
            try await base.createChannel(bundleID: bundleID, storagePolicy: storagePolicy, teamID: teamID, environment: environment)
        }
        func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws {
            try await base.deleteChannel(channelID, bundleID: bundleID, teamID: teamID, environment: environment)
        }
    }

    /// Outcomes to the bus, as one process writes them: after a kill -9 nothing more is written.
    struct BusOutcomes: OutcomeSink {
        struct Killed: Error {}
        let bus: MemoryBus
        let process: ProcessSender

        func publish(_ outcome: PushOutcome) async throws {
            guard !process.killed.load(ordering: .relaxed) else { throw Killed() }
            try await bus.send(outcome, to: DispatcherServiceTests.outcomes)
        }

        func record(_ channel: BroadcastChannelRecord) async throws {}
    }

    /// One apns-dispatcher process on the cluster: its service group (the token loader and the
    /// dispatcher's loop) as `DispatcherApp` assembles it, with the bus in place of Kafka.
    final class Dispatcher: Sendable {
        let engine: DispatchEngine
        let sender: ProcessSender
        private let process: MemoryBusProcess
        var consumer: MemoryGroupMember { process.consumer }

        init(
            _ cluster: Cluster, rebalance: MemoryBus.RebalanceProtocol = .eager, autoCommit: Bool = true, policy: DispatcherPolicy = DispatcherPolicy(),
            drainTimeout: Duration = .seconds(8)
        ) {
            let bus = cluster.bus
            var logger = Logger(label: "dispatcher")
            logger.logLevel = .critical
            let consumer = bus.member(group: "apns-dispatcher", topics: [DispatcherServiceTests.requests], rebalance: rebalance, autoCommit: autoCommit)
            let tickets = TicketBook(consumer: consumer)
            let tokens = PartitionTokens()
            let sender = ProcessSender(cluster.sender)
            self.sender = sender
            let outcomes = BusOutcomes(bus: bus, process: sender)
            let engine = DispatchEngine(
                sender: sender, tokens: tokens, outcomes: outcomes, policy: policy, teams: [DispatcherServiceTests.bundleId: "TEAM123456"], logger: logger,
                onDone: { tickets.done($0) }, onAbandon: { tickets.abandon($0) })
            let loader = PartitionTokenLoader(tokens: tokens, service: "apns-dispatcher", logger: logger) { partitions in
                bus.replica([DispatcherServiceTests.tokens], partitions: partitions)
            }
            let service = DispatcherService(
                consumer: consumer, deadLetters: DeadLetterWriter(producer: bus, consumer: consumer, service: "apns-dispatcher", logger: logger, topic: "dead-letters"),
                engine: engine, tickets: tickets, tokenLoader: loader,
                recentOutcomes: RecentOutcomes(logger: logger) { partitions, since in
                    bus.replica([DispatcherServiceTests.outcomes], partitions: partitions, since: since)
                },
                drainTimeout: drainTimeout, logger: logger)
            self.engine = engine
            process = MemoryBusProcess(consumer: consumer, services: [loader, service], logger: logger)
        }

        /// SIGTERM: what is in flight finishes, then it commits and leaves.
        func stop() async { await process.stop() }

        /// kill -9: nothing more is sent, answered, written or committed; the group notices when
        /// its session expires (``MemoryGroupMember/expireSession()``).
        func kill() async {
            sender.killed.store(true, ordering: .relaxed)
            await process.kill()
        }
    }

    @Test("requests over four partitions: each sent once, one final outcome each, the partitions' offsets committed past them")
    func delivers() async throws {
        let cluster = Cluster()
        var requests: [PushRequest] = []
        for index in 0..<20 {
            try await cluster.register("order-\(index)", token: hexToken(index))
            requests.append(try await cluster.update("order-\(index)"))
        }
        let dispatcher = Dispatcher(cluster)
        await cluster.waitForFinals(requests)
        cluster.expectOnce(requests)
        await dispatcher.stop()
        for partition in Int32(0)..<4 {
            #expect(
                cluster.bus.committed(group: "apns-dispatcher", topic: Self.requests, partition: partition)
                    == Int64(cluster.bus.records(Self.requests, partition: partition).count))
        }
    }

    /// Activities whose requests go to partition `partition` of the requests topic.
    static func activities(in partition: Int32, count: Int, prefix: String = "order") -> [String] {
        var found: [String] = []
        for index in 0... where found.count < count {
            let activity = "\(prefix)-\(index)"
            if KafkaPartitioner.partition(ofKey: MessageKey.activity(bundleId: bundleId, activityId: activity), partitions: 4) == partition {
                found.append(activity)
            }
            if found.count == count { break }
        }
        return found
    }


    @Test(
        "a rebalance while pushes are in flight (eager: every partition; cooperative: those that move): the old owner's revocation waits for them and their outcomes, the new owner starts after them and sends none again",
        arguments: [MemoryBus.RebalanceProtocol.eager, .cooperative])
    func revocationWaitsForFlight(_ rebalance: MemoryBus.RebalanceProtocol) async throws {
        let cluster = Cluster()
        var requests: [PushRequest] = []
        for index in 0..<16 { try await cluster.register("order-\(index)", token: hexToken(index)) }
        let first = Dispatcher(cluster, rebalance: rebalance)
        cluster.sender.hold()
        for index in 0..<16 { requests.append(try await cluster.update("order-\(index)")) }
        try await eventually("every push in flight") { cluster.sender.sent.count == 16 }
        // A second dispatcher joins: partitions move, their pushes still unanswered.
        let second = Dispatcher(cluster, rebalance: rebalance)
        try await eventually("the first one's revocation waits") { !cluster.bus.revoking(group: "apns-dispatcher").isEmpty }
        cluster.sender.release()
        await cluster.waitForFinals(requests)
        try await eventually("both dispatchers hold partitions") { cluster.bus.assignment(group: "apns-dispatcher").values.allSatisfy { $0.count == 2 } }
        // What the second one reads from now on is its own.
        let later = try await cluster.update("order-3", sequence: 2)
        await cluster.waitForFinals([later])
        cluster.expectOnce(requests + [later])
        await first.stop()
        await second.stop()
    }

    /// Requests to `activities` of partition 0 behind one that waits for its token (which holds the
    /// partition's commit): delivered, their outcomes written, their offsets not committed.
    static func heldCommit(_ cluster: Cluster) async throws -> (waiting: PushRequest, delivered: [PushRequest]) {
        let activities = activities(in: 0, count: 6)
        for activity in activities.dropFirst() { try await cluster.register(activity, token: hexToken(activity.hashValue & 0xFFFF)) }
        let waiting = try await cluster.update(activities[0])
        var delivered: [PushRequest] = []
        for activity in activities.dropFirst() { delivered.append(try await cluster.update(activity)) }
        await cluster.waitForFinals(delivered)
        return (waiting, delivered)
    }

    /// A dispatcher that remembers one finished request of its own (and none by activity): only the
    /// recent outcomes it reads at an assignment keep it from sending again the requests read again.
    static var forgetful: DispatcherPolicy {
        var policy = DispatcherPolicy()
        policy.rememberedFinished = 1
        policy.rememberedFinishedPerActivity = 0
        return policy
    }

    @Test("an eager rebalance gives a partition back to the member that had it: the requests read again past the one that held the commit are not sent again (their outcomes are read again at that assignment)")
    func eagerRebalanceBackToSameMember() async throws {
        let cluster = Cluster()
        let first = Dispatcher(cluster, rebalance: .eager, policy: Self.forgetful)
        let (waiting, delivered) = try await Self.heldCommit(cluster)
        let waitingAt = cluster.bus.records(Self.requests, partition: 0).first { $0.keyString == waiting.key }!.offset
        #expect(cluster.bus.committed(group: "apns-dispatcher", topic: Self.requests, partition: 0) ?? 0 <= waitingAt, "the waiting request holds the commit")
        // Another member joins: every partition is revoked, and partition 0 given back to the first.
        let second = Dispatcher(cluster, rebalance: .eager, policy: Self.forgetful)
        try await eventually("partition 0 back with the first member, the rest shared") {
            let assignment = cluster.bus.assignment(group: "apns-dispatcher")
            return assignment.count == 2 && assignment.values.allSatisfy { $0.count == 2 }
                && assignment[first.consumer.name + ".1"]?.contains(KafkaTopicPartition(topic: Self.requests, partition: 0)) == true
        }
        try await cluster.register(waiting.activityId!, token: hexToken(99))
        await cluster.waitForFinals([waiting])
        cluster.expectOnce(delivered + [waiting])
        await first.stop()
        await second.stop()
    }

    @Test("a member that leaves and joins again as a new member (a lengthened fetch wait) reads its partitions again from the commit: nothing past it is sent again")
    func rejoinAsNewMember() async throws {
        let cluster = Cluster()
        let dispatcher = Dispatcher(cluster, policy: Self.forgetful)
        let (waiting, delivered) = try await Self.heldCommit(cluster)
        await dispatcher.consumer.rejoin()
        try await cluster.register(waiting.activityId!, token: hexToken(98))
        await cluster.waitForFinals([waiting])
        cluster.expectOnce(delivered + [waiting])
        await dispatcher.stop()
    }

    @Test("kill -9 with nothing committed, a push-to-start in flight: the next owner reads every partition again and sends nothing again; the start whose answer is unknown fails without a second attempt")
    func killedOwner() async throws {
        let cluster = Cluster()
        let first = Dispatcher(cluster, autoCommit: false, policy: Self.forgetful)
        var requests: [PushRequest] = []
        for index in 0..<12 {
            try await cluster.register("order-\(index)", token: hexToken(index))
            requests.append(try await cluster.update("order-\(index)"))
        }
        await cluster.waitForFinals(requests)
        let key = try await cluster.registerPushToStart(token: hexToken(50))
        cluster.sender.hold()
        let start = try await cluster.pushToStart(key: key, activity: "order-50")
        try await eventually("the push-to-start sent") { cluster.sends[start.requestId] == 1 }
        await first.kill()
        cluster.sender.release()
        let second = Dispatcher(cluster, autoCommit: false, policy: Self.forgetful)
        await first.consumer.expireSession()
        await cluster.waitForFinals(requests + [start])
        cluster.expectOnce(requests + [start])
        #expect(cluster.finals[start.requestId] == [.failed], "its answer is unknown: not sent again")
        await second.stop()
    }

    @Test("a session lost while a retry waits for its backoff: the old membership never sends it; the partition's next assignment reads it again and sends it once more")
    func lostSessionStopsRetries() async throws {
        let cluster = Cluster()
        var policy = DispatcherPolicy()
        policy.retry.baseDelay = .seconds(1)
        policy.retry.maximumDelay = .seconds(1)
        let dispatcher = Dispatcher(cluster, policy: policy)
        try await cluster.register("order-1", token: hexToken(1))
        cluster.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        let request = try await cluster.update("order-1")
        try await eventually("the first attempt answered 503") { cluster.sender.answers == 1 }
        // Its session expires before the retry: the partitions are lost, the member joins again.
        await dispatcher.consumer.expireSession()
        await cluster.waitForFinals([request])
        // Past the time the lost membership's retry was due.
        try await Task.sleep(for: .milliseconds(1_500))
        #expect(cluster.finals[request.requestId] == [.delivered])
        #expect(cluster.sends[request.requestId] == 2, "the 503, then one attempt by the new membership: the lost one's retry never went")
        await dispatcher.stop()
    }

    @Test("Kafka refuses the outcome twice, then holds it: the request's offset is not committed until its outcome is written, and it is sent once")
    func refusedOutcome() async throws {
        let cluster = Cluster()
        let writes = Atomic<Int>(0)
        cluster.bus.failProduces { topic in
            guard topic == Self.outcomes else { return nil }
            let write = writes.add(1, ordering: .relaxed).newValue
            return write <= 2 ? .refuse(KafkaError(code: .consumer, message: "not enough replicas")) : write == 3 ? .hold : nil
        }
        let dispatcher = Dispatcher(cluster)
        try await cluster.register("order-1", token: hexToken(1))
        let request = try await cluster.update("order-1")
        try await eventually("refused twice, then held") { cluster.bus.heldProduces == 1 }
        let partition = cluster.bus.records(Self.requests).first { $0.keyString == request.key }!.partition
        #expect(cluster.bus.committed(group: "apns-dispatcher", topic: Self.requests, partition: partition) == nil, "not committed before its outcome is written")
        cluster.bus.releaseHeldProduces()
        await cluster.waitForFinals([request])
        cluster.expectOnce([request])
        try await eventually("committed past it") {
            cluster.bus.committed(group: "apns-dispatcher", topic: Self.requests, partition: partition) == 1
        }
        await dispatcher.stop()
    }

    @Test("SIGTERM with pushes in flight: the drain (and the revocation at the close) waits for their answers and outcomes, commits past them, and the next owner sends none again")
    func gracefulStopHandsOver() async throws {
        let cluster = Cluster()
        let first = Dispatcher(cluster)
        var requests: [PushRequest] = []
        for index in 0..<8 { try await cluster.register("order-\(index)", token: hexToken(index)) }
        cluster.sender.hold()
        for index in 0..<8 { requests.append(try await cluster.update("order-\(index)")) }
        try await eventually("every push in flight") { cluster.sender.sent.count == 8 }
        let second = Dispatcher(cluster)
        async let stopped: Void = first.stop()
        try await Task.sleep(for: .milliseconds(100))
        cluster.sender.release()
        await stopped
        await cluster.waitForFinals(requests)
        try await eventually("the second holds every partition") {
            cluster.bus.assignment(group: "apns-dispatcher").values.contains { $0.count == 4 }
        }
        cluster.expectOnce(requests)
        await second.stop()
    }

    @Test("a session lost while the loop is busy (a dead letter Kafka holds) and a retry waits: the old owner sends nothing more of the lost partitions, though its loop has not seen the loss; the new owner sends it once")
    func lossStopsWorkAtOnce() async throws {
        let cluster = Cluster()
        var policy = DispatcherPolicy()
        policy.retry.baseDelay = .seconds(1)
        policy.retry.maximumDelay = .seconds(1)
        let dispatchers = [Dispatcher(cluster, policy: policy), Dispatcher(cluster, policy: policy)]
        try await eventually("two members, two partitions each") {
            let assignment = cluster.bus.assignment(group: "apns-dispatcher")
            return assignment.count == 2 && assignment.values.allSatisfy { $0.count == 2 }
        }
        let activity = Self.activities(in: 0, count: 1)[0]
        // The first is the one that holds partition 0.
        let holders = cluster.bus.assignment(group: "apns-dispatcher").filter { $0.value.contains(.init(topic: Self.requests, partition: 0)) }.keys
        let first = try #require(dispatchers.first { holders.contains($0.consumer.name + ".1") })
        let second = try #require(dispatchers.first { $0 !== first })
        try await cluster.register(activity, token: hexToken(7))
        cluster.sender.script(hexToken(7), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        let request = try await cluster.update(activity)
        try await eventually("the first attempt answered 503") { cluster.sender.answers == 1 }
        // The first member's loop is held by a dead letter Kafka does not acknowledge; then its session expires.
        cluster.bus.failProduces { $0 == "dead-letters" ? .hold : nil }
        try await cluster.bus.send(topic: Self.requests, key: MessageKey.activity(bundleId: Self.bundleId, activityId: activity), value: Array("{".utf8))
        try await eventually("the dead letter held") { cluster.bus.heldProduces == 1 }
        await first.consumer.expireSession(rejoining: false)
        try await eventually("the second member delivered it") { cluster.finals[request.requestId] != nil }
        // Past the time the first member's retry was due.
        try await Task.sleep(for: .milliseconds(1_500))
        cluster.bus.failProduces(nil)
        cluster.bus.releaseHeldProduces()
        try await Task.sleep(for: .milliseconds(100))
        #expect(cluster.finals[request.requestId] == [.delivered])
        #expect(cluster.sends[request.requestId] == 2, "the 503, then the second member's attempt: the first one's retry never went")
        await first.stop()
        await second.stop()
    }
}
