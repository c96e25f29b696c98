import APNsSimulator
import Crypto
import Foundation
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization
import Testing
@testable import APNsDispatcher

private let logger = testLogger("islet.test.dispatcher-integration")

private let teamKey = P256.Signing.PrivateKey()
private let signingKey = APNsSigningKey(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: teamKey)
private let bundle = "com.example.food"

/// A simulator, topics of its own, and a way to run dispatchers against them.
final class Rig: Sendable {
    let topics: DispatcherApp.Topics
    let simulator: APNsSimulatorServer
    let tls: SimulatorTLS
    let producer: KafkaProducer
    private let tasks: Task<Void, any Error>
    let port: Int

    init() async throws {
        var topics = DispatcherApp.Topics()
        let suffix = UUID().uuidString.prefix(8).lowercased()
        topics.tokens = "test.tokens.\(suffix)"
        topics.pushRequests = "test.requests.\(suffix)"
        topics.pushOutcomes = "test.outcomes.\(suffix)"
        topics.deadLetters = "test.dlq.\(suffix)"
        topics.budgets = "test.budgets.\(suffix)"
        topics.channels = "test.channels.\(suffix)"
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        _ = try await admin.createTopics([
            .init(name: topics.tokens, partitions: 3, configs: ["cleanup.policy": "compact"]), .init(name: topics.pushRequests, partitions: 3),
            .init(name: topics.pushOutcomes, partitions: 3), .init(name: topics.deadLetters, partitions: 1),
            .init(name: topics.budgets, partitions: 3, configs: ["cleanup.policy": "compact"]),
            .init(name: topics.channels, partitions: 3, configs: ["cleanup.policy": "compact"]),
        ])
        self.topics = topics
        tls = try SimulatorTLS.selfSigned()
        simulator = APNsSimulatorServer(
            configuration: .init(keys: [.init(keyID: signingKey.keyID, teamID: signingKey.teamID, publicKey: teamKey.publicKey)], tls: tls), logger: logger)
        producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let (simulator, producer) = (self.simulator, self.producer)
        tasks = Task {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await simulator.run() }
                group.addTask { try await producer.run() }
            }
        }
        port = try await simulator.listeningPort
    }

    func stop() async {
        producer.shutdown()
        tasks.cancel()
        _ = try? await tasks.value
    }

    /// `frequentBudget`: the priority-10 budget of the rig's activities (their tokens have frequent updates on).
    func startDispatcher(group: String, frequentBudget: BudgetPolicy.Limits? = nil, budgetsInterval: Duration = .seconds(5)) async throws
        -> RunningDispatcher
    {
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]), serviceName: group,
            defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: logger)
        var policy = DispatcherPolicy()
        policy.retry.baseDelay = .milliseconds(50)
        policy.retry.maximumDelay = .milliseconds(500)
        if let frequentBudget { policy.budgets.frequent = frequentBudget }
        var client = APNsClient.Configuration(requestTimeout: .seconds(10), trustedCertificatesPEM: tls.certificatePEM)
        client.useEverywhere(APNsClient.Endpoint(host: "127.0.0.1", port: port))
        let dispatcherSettings = DispatcherSettings(
            keys: [signingKey], teams: [bundle: signingKey.teamID], client: client, policy: policy, budgetsInterval: budgetsInterval)
        let app = try DispatcherApp(runtime: runtime, settings: dispatcherSettings, topics: topics)
        return RunningDispatcher(group: runtime.makeServiceGroup(app.services), tokens: app.tokens)
    }

    func register(_ activity: String, token: String) async throws {
        let now = Date()
        try await producer.send(
            TokenRecord(
                kind: .update, activityId: activity, userId: "u", token: token, app: AppTarget(bundleId: bundle, environment: .production),
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "1.0", state: .active, activityStartedAt: now,
                registeredAt: now, updatedAt: now),
            to: topics.tokens)
    }

    func registerPushToStart(device: String, token: String) async throws -> String {
        let now = Date()
        let record = TokenRecord(
            kind: .pushToStart, deviceId: device, userId: "u", token: token, app: AppTarget(bundleId: bundle, environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "1.0", state: .active, registeredAt: now, updatedAt: now)
        try await producer.send(record, to: topics.tokens)
        return record.key!
    }

    func request(activity: String? = nil, pushToStartKey: String? = nil, event: ActivityEventKind = .update, sequence: Int64, priority: Int = 10) -> PushRequest {
        let startPart = event == .start ? #","attributes-type":"DeliveryAttributes","attributes":{"orderId":"42"},"alert":{"title":"Order placed"}"# : ""
        return PushRequest(
            requestId: UUID().uuidString.lowercased(), activityId: activity, pushToStartKey: pushToStartKey, event: event,
            app: AppTarget(bundleId: bundle, environment: .production), attributesType: "DeliveryAttributes",
            payload: #"{"aps":{"event":"\#(event.rawValue)","timestamp":\#(1_795_000_000 + sequence),"content-state":{"sequence":\#(sequence)}\#(startPart)}}"#,
            priority: priority, urgency: .routine, supersedable: false, alerting: event == .start, apnsTimestamp: 1_795_000_000 + sequence,
            contentSequence: sequence, createdAt: Date())
    }

    func send(_ requests: [PushRequest]) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for request in requests {
                group.addTask { try await self.producer.send(request, to: self.topics.pushRequests) }
            }
            try await group.waitForAll()
        }
    }

    /// Reads outcomes until every one of `requestIds` has one (at most `limit`).
    func outcomes(for requestIds: Set<String>, limit: Duration = .seconds(60)) async throws -> [PushOutcome] {
        let seen = Mutex<Set<String>>([])
        let progress = try await TopicSnapshot.read([topics.pushOutcomes], bootstrapServers: try TestBroker.servers(), timeout: limit, logger: logger) {
            if let outcome = $0.latest.flatMap({ try? IsletJSON.decode(PushOutcome.self, from: $0.value ?? []) }) {
                seen.withLock { _ = $0.insert(outcome.requestId) }
            }
            return seen.withLock { $0.isSuperset(of: requestIds) }
        }
        return progress.messages.compactMap { try? IsletJSON.decode(PushOutcome.self, from: $0.value ?? []) }
    }
}

final class RunningDispatcher: Sendable {
    let group: ServiceGroup
    /// The tokens it holds: those of its partitions.
    let tokens: PartitionTokens
    private let task: Task<Void, any Error>

    init(group: ServiceGroup, tokens: PartitionTokens) {
        self.group = group
        self.tokens = tokens
        task = Task { try await group.run() }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

@Suite("apns-dispatcher against the broker and the simulator", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(4)))
struct DispatcherIntegrationTests {
    @Test("requests become pushes the phone receives in order, each with exactly one outcome, which keeps APNs's apns-unique-id (the delivery log's key)")
    func happyPath() async throws {
        let rig = try await Rig()
        let dispatcher = try await rig.startDispatcher(group: "dispatcher-\(UUID())")
        var requests: [PushRequest] = []
        for a in 0..<5 {
            try await rig.register("order-\(a)", token: hexToken(a))
        }
        for a in 0..<5 {
            for s in 1...3 { requests.append(rig.request(activity: "order-\(a)", sequence: Int64(s))) }
            requests.append(rig.request(activity: "order-\(a)", event: .end, sequence: 4))
        }
        for request in requests { try await rig.producer.send(request, to: rig.topics.pushRequests) }
        let outcomes = try await rig.outcomes(for: Set(requests.map(\.requestId)))
        #expect(Set(outcomes.map(\.requestId)) == Set(requests.map(\.requestId)))
        #expect(Dictionary(grouping: outcomes, by: \.requestId).values.allSatisfy { $0.count == 1 }, "one outcome each")
        #expect(outcomes.allSatisfy { $0.result == .delivered }, "\(outcomes.map(\.result))")
        for a in 0..<5 {
            let received = rig.simulator.state.notifications(token: hexToken(a))
            #expect(received.map(\.event) == ["update", "update", "update", "end"])
            #expect(received.map(\.timestamp) == [1_795_000_001, 1_795_000_002, 1_795_000_003, 1_795_000_004])
            #expect(received.map(\.apnsID) == requests.filter { $0.activityId == "order-\(a)" }.map(\.requestId))
            for push in received {
                #expect(outcomes.first { $0.requestId == push.apnsID }?.apns?.uniqueId == push.uniqueID, "the outcome names the push's entry in Apple's delivery log")
            }
        }
        try await dispatcher.stop()
        await rig.stop()
    }

    @Test("broadcasts: the first makes the match's channel at APNs and records it; the next reuse it, also after the dispatcher restarts (it reads the record); each reaches the channel's subscribers with one push")
    func broadcasts() async throws {
        let rig = try await Rig()
        func broadcast(_ sequence: Int64) -> PushRequest {
            var request = rig.request(activity: "match-7", sequence: sequence)
            request.channelStoragePolicy = 0
            return request
        }
        var dispatcher = try await rig.startDispatcher(group: "dispatcher-\(UUID())")
        let first = broadcast(1)
        try await rig.send([first])
        var outcomes = try await rig.outcomes(for: [first.requestId])
        let channel = try #require(rig.simulator.state.channels(bundleId: bundle).first)
        #expect(outcomes.first?.result == .delivered && outcomes.first?.channelId == channel.id)
        #expect(outcomes.first?.apns?.uniqueId == rig.simulator.state.broadcasts(channel: channel.id).first?.uniqueID, "a broadcast's 200 carries apns-unique-id")
        rig.simulator.state.subscribe(1_000, to: channel.id, bundleId: bundle)
        let records = try await TestBroker.readToEnd([rig.topics.channels])
        let record = try IsletJSON.decode(BroadcastChannelRecord.self, from: try #require(records.first?.value))
        #expect(records.count == 1 && record.channelId == channel.id && record.activityId == "match-7")
        #expect(records.first?.key.map { String(decoding: $0, as: UTF8.self) } == "\(bundle)/match-7")

        try await dispatcher.stop()
        dispatcher = try await rig.startDispatcher(group: "dispatcher-\(UUID())")
        let second = broadcast(2)
        try await rig.send([second])
        outcomes = try await rig.outcomes(for: [first.requestId, second.requestId])
        #expect(outcomes.first { $0.requestId == second.requestId }?.channelId == channel.id)
        #expect(rig.simulator.state.channels(bundleId: bundle).count == 1, "no second channel after the restart")
        #expect(rig.simulator.state.broadcasts(channel: channel.id).map(\.subscribers) == [0, 1_000])
        #expect(rig.simulator.state.notifications().isEmpty, "no push to a token")
        try await dispatcher.stop()
        await rig.stop()
    }

    @Test("the orphan sweep: a channel made at APNs that no record owns is deleted on the pass after the one that first found it; a recorded channel is kept; the count held is reported")
    func orphanSweep() async throws {
        let rig = try await Rig()
        let dispatcher = try await rig.startDispatcher(group: "dispatcher-\(UUID())")
        var broadcast = rig.request(activity: "match-9", sequence: 1)
        broadcast.channelStoragePolicy = 0
        try await rig.send([broadcast])
        _ = try await rig.outcomes(for: [broadcast.requestId])
        let recorded = try #require(rig.simulator.state.channels(bundleId: bundle).first?.id)
        // A dispatcher that died between APNs's answer and the record: the channel is at APNs, unrecorded.
        var configuration = APNsClient.Configuration(requestTimeout: .seconds(10), trustedCertificatesPEM: rig.tls.certificatePEM)
        configuration.useEverywhere(APNsClient.Endpoint(host: "127.0.0.1", port: rig.port))
        let client = try APNsClient(configuration: configuration, keys: [signingKey], logger: logger)
        let orphan = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored, teamID: signingKey.teamID, environment: .production)
        let sweeper = ChannelSweeper(
            listing: client, records: ChannelSweeper.readRecords(topic: rig.topics.channels, bootstrapServers: try TestBroker.servers(), logger: logger),
            teams: [bundle: signingKey.teamID], deletes: true, logger: logger)
        let app = AppTarget(bundleId: bundle, environment: .production)
        // Without deletion (the default): counted and logged, left at APNs.
        let counting = ChannelSweeper(
            listing: client, records: ChannelSweeper.readRecords(topic: rig.topics.channels, bootstrapServers: try TestBroker.servers(), logger: logger),
            teams: [bundle: signingKey.teamID], logger: logger)
        #expect(await counting.sweep()[app] == ChannelSweeper.Pass(held: 2, unowned: 1, deleted: []))
        #expect(await counting.sweep()[app] == ChannelSweeper.Pass(held: 2, unowned: 1, deleted: []))
        // One host for both environments (a simulator): the sandbox listing shows the production
        // channels, which production's records own.
        let shared = ChannelSweeper(
            listing: client, records: ChannelSweeper.readRecords(topic: rig.topics.channels, bootstrapServers: try TestBroker.servers(), logger: logger),
            teams: [bundle: signingKey.teamID], environments: [.sandbox], deletes: true, sharedHost: true, logger: logger)
        let sandbox = AppTarget(bundleId: bundle, environment: .sandbox)
        _ = await shared.sweep()
        #expect(await shared.sweep()[sandbox]?.deleted == [orphan], "the orphan only")
        #expect(rig.simulator.state.channels(bundleId: bundle).map(\.id) == [recorded])
        let again = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored, teamID: signingKey.teamID, environment: .production)
        let first = await sweeper.sweep()
        #expect(first[app] == ChannelSweeper.Pass(held: 2, unowned: 1, deleted: []), "found, not yet deleted: it may be a channel being made")
        let second = await sweeper.sweep()
        #expect(second[app] == ChannelSweeper.Pass(held: 2, unowned: 1, deleted: [again]))
        #expect(rig.simulator.state.channels(bundleId: bundle).map(\.id) == [recorded], "the recorded channel is kept")
        #expect(await sweeper.sweep()[app] == ChannelSweeper.Pass(held: 1, unowned: 0, deleted: []))
        client.shutdown()
        try await dispatcher.stop()
        await rig.stop()
    }

    @Test("each APNs answer ends as the table says: 410 → tokenInvalid with its timestamp, 500s → retried, 400 → rejected; GOAWAY and resets → resent and delivered")
    func apnsAnswers() async throws {
        let rig = try await Rig()
        for a in 0..<5 { try await rig.register("a\(a)", token: hexToken(100 + a)) }
        let when = Date(timeIntervalSince1970: 1_795_000_500)
        rig.simulator.state.add(.reject(410, "Unregistered", token: hexToken(100), timestamp: when))
        rig.simulator.state.add(.reject(500, "InternalServerError", token: hexToken(101), count: 2))
        rig.simulator.state.add(.reject(400, "BadTopic", token: hexToken(102)))
        let dispatcher = try await rig.startDispatcher(group: "dispatcher-\(UUID())")
        let answered = (0..<3).map { rig.request(activity: "a\($0)", sequence: 1) }
        try await rig.send(answered)
        var outcomes = Dictionary(grouping: try await rig.outcomes(for: Set(answered.map(\.requestId))), by: \.requestId)
        #expect(outcomes[answered[0].requestId]?.first?.result == .tokenInvalid)
        #expect(outcomes[answered[0].requestId]?.first?.apns?.status == 410)
        #expect(outcomes[answered[0].requestId]?.first?.apns?.timestamp.map { abs($0.timeIntervalSince(when)) < 0.01 } == true)
        #expect(outcomes[answered[1].requestId]?.first?.result == .delivered)
        #expect(outcomes[answered[1].requestId]?.first?.attempts == 3)
        #expect(outcomes[answered[2].requestId]?.first?.result == .rejected)
        #expect(outcomes[answered[2].requestId]?.first?.attempts == 1)

        // Connection faults: whatever was in flight on the connection is resent, and delivered. One
        // at a time: a reset closes the connection under every push on it, so a push resent after
        // the GOAWAY on the connection the reset then closes is rightly resent once more (its
        // answer was lost; it may have arrived) and reaches the simulator twice. Both faults at once
        // made that happen in both sanitizer runs, where everything is slower.
        rig.simulator.state.add(Fault(kind: .goAway, token: hexToken(103)))
        let goneAway = rig.request(activity: "a3", sequence: 1)
        try await rig.send([goneAway])
        outcomes = Dictionary(grouping: try await rig.outcomes(for: Set((answered + [goneAway]).map(\.requestId))), by: \.requestId)
        #expect(outcomes[goneAway.requestId]?.first?.result == .delivered)
        #expect(rig.simulator.state.notifications(token: hexToken(103)).map(\.apnsID) == [goneAway.requestId], "the stream past GOAWAY was not processed")
        rig.simulator.state.add(Fault(kind: .reset, token: hexToken(104)))
        let reset = rig.request(activity: "a4", sequence: 1)
        try await rig.send([reset])
        outcomes = Dictionary(grouping: try await rig.outcomes(for: Set((answered + [goneAway, reset]).map(\.requestId))), by: \.requestId)
        #expect(outcomes[reset.requestId]?.first?.result == .delivered)
        #expect(outcomes.values.allSatisfy { $0.count == 1 }, "one outcome each")
        #expect(rig.simulator.state.stats.goAways == 1)
        #expect(rig.simulator.state.stats.resets == 1)
        try await dispatcher.stop()
        await rig.stop()
    }

    @Test("a budget spent on one dispatcher goes on at the next: the periodic round writes it, the next owner reads it with the tokens, and its next priority-10 update goes at 5")
    func budgetCarried() async throws {
        let rig = try await Rig()
        let limits = BudgetPolicy.Limits(capacity: 2, period: .seconds(3_600))
        try await rig.register("spent", token: hexToken(700))
        try await rig.register("unspent", token: hexToken(701))
        let group = "dispatcher-\(UUID())"
        let first = try await rig.startDispatcher(group: group, frequentBudget: limits, budgetsInterval: .milliseconds(200))
        let spending = (1...2).map { rig.request(activity: "spent", sequence: Int64($0)) }
        // One after the other: sent together, the second (newer content of the same activity) may
        // find the first still queued (the APNs connection not up yet on a busy machine) and
        // replace it (`coalesced`), and only one unit of budget is spent.
        var spentOutcomes: [PushOutcome] = []
        for request in spending {
            try await rig.send([request])
            spentOutcomes += try await rig.outcomes(for: [request.requestId]).filter { $0.requestId == request.requestId }
        }
        #expect(spentOutcomes.map(\.priorityUsed) == [10, 10])

        // Written by a periodic round, while the first dispatcher runs (what a crash would leave).
        // (A round between the two sends wrote one spent of two first.)
        @Sendable func latest(_ messages: [KafkaMessage]) -> DispatchBudgetRecord? {
            messages.last { $0.keyString == "com.example.food/spent" }.flatMap { try? IsletJSON.decode(DispatchBudgetRecord.self, from: $0.value ?? []) }
        }
        let written = try await TopicSnapshot.read([rig.topics.budgets], bootstrapServers: try TestBroker.servers(), timeout: .seconds(20), logger: logger) {
            (latest($0.messages)?.available ?? 2) < 0.1
        }
        let record = try #require(latest(written.messages))
        #expect(record.available < 0.1)
        #expect(record.capacity == 2)
        #expect(record.partition == KafkaPartitioner.partition(ofKey: "com.example.food/spent", partitions: 3))
        try await first.stop()

        let second = try await rig.startDispatcher(group: group, frequentBudget: limits)
        let next = [rig.request(activity: "spent", sequence: 3), rig.request(activity: "unspent", sequence: 1)]
        try await rig.send(next)
        let outcomes = Dictionary(grouping: try await rig.outcomes(for: Set(next.map(\.requestId))), by: \.requestId)
        try await second.stop()
        #expect(outcomes[next[0].requestId]?.first?.result == .deliveredDowngraded, "its budget was spent on the first dispatcher")
        #expect(outcomes[next[0].requestId]?.first?.priorityUsed == 5)
        #expect(outcomes[next[1].requestId]?.first?.priorityUsed == 10)
        await rig.stop()
    }

    @Test("a graceful stop with pushes in flight waits for their answers and writes their outcomes; the next dispatcher sends none of them again")
    func gracefulStopInFlight() async throws {
        // Found by the end-to-end graceful-stop suite: the consumer closed itself as soon as graceful
        // shutdown began, beside the drain; the loop then ended and cancelled the pushes in flight,
        // which got no outcome, and the next dispatcher sent them again.
        let rig = try await Rig()
        let activities = (0..<20).map { "g\($0)" }
        for (a, activity) in activities.enumerated() { try await rig.register(activity, token: hexToken(400 + a)) }
        let group = "dispatcher-\(UUID())"
        let first = try await rig.startDispatcher(group: group)
        let warmUp = rig.request(activity: activities[0], sequence: 1, priority: 5)
        try await rig.send([warmUp])
        _ = try await rig.outcomes(for: [warmUp.requestId])

        // APNs answers late, well within the rig's 10 s request timeout (under ThreadSanitizer 1.5 s
        // was not: pushes timed out and were rightly resent by the first dispatcher itself): every
        // push is in flight when the stop begins.
        rig.simulator.state.add(Fault(kind: .delay, delayMilliseconds: 500, count: nil))
        let inFlight = activities.map { rig.request(activity: $0, sequence: 2, priority: 5) }
        try await rig.send(inFlight)
        for _ in 0..<500 where rig.simulator.state.notifications().count < 1 + inFlight.count {
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(rig.simulator.state.notifications().count == 1 + inFlight.count, "the pushes did not reach the simulator")
        try await first.stop()
        rig.simulator.state.clearFaults()

        let second = try await rig.startDispatcher(group: group)
        let marker = rig.request(activity: activities[1], sequence: 3, priority: 5)
        try await rig.send([marker])
        let outcomes = try await rig.outcomes(for: Set((inFlight + [marker]).map(\.requestId)))
        try await second.stop()
        let byRequest = Dictionary(grouping: outcomes, by: \.requestId)
        for request in inFlight {
            #expect(byRequest[request.requestId]?.map(\.result) == [.delivered], "one outcome, delivered")
            #expect(byRequest[request.requestId]?.first?.attempts == 1, "sent once, answered")
        }
        let received = Dictionary(grouping: rig.simulator.state.notifications(), by: \.apnsID)
        let resent = inFlight.filter { (received[$0.requestId]?.count ?? 0) != 1 }
        #expect(resent.count == 0, "\(resent.count) of \(inFlight.count) pushes in flight at the stop reached APNs twice")
        #expect(received[marker.requestId]?.count == 1, "the second dispatcher took over")
        await rig.stop()
    }

    @Test("a second dispatcher joins, and one leaves, while pushes are in flight: the partitions that move finish their pushes and write their outcomes before the next owner reads them; none reaches APNs twice")
    func rebalanceInFlight() async throws {
        let rig = try await Rig()
        let activities = (0..<12).map { "rb\($0)" }
        for (a, activity) in activities.enumerated() { try await rig.register(activity, token: hexToken(500 + a)) }
        var ptsKeys: [String] = []
        for d in 0..<6 { ptsKeys.append(try await rig.registerPushToStart(device: "rb-device-\(d)", token: hexToken(600 + d))) }
        let group = "dispatcher-\(UUID())"
        let first = try await rig.startDispatcher(group: group)
        let warmUp = rig.request(activity: activities[0], sequence: 1, priority: 5)
        try await rig.send([warmUp])
        _ = try await rig.outcomes(for: [warmUp.requestId])
        // APNs answers late: at any moment some pushes of every partition are in flight.
        rig.simulator.state.add(Fault(kind: .delay, delayMilliseconds: 200, count: nil))
        let sent = Mutex<[PushRequest]>([])
        let stream = Task {
            var sequence: Int64 = 2
            var starts = ptsKeys.makeIterator()
            while !Task.isCancelled {
                var batch = activities.map { rig.request(activity: $0, sequence: sequence, priority: 5) }
                if sequence % 4 == 0, let key = starts.next() { batch.append(rig.request(pushToStartKey: key, event: .start, sequence: sequence)) }
                try await rig.send(batch)
                sent.withLock { $0 += batch }
                sequence += 1
                try await Task.sleep(for: .milliseconds(400))
            }
        }
        try await Task.sleep(for: .seconds(2))
        let second = try await rig.startDispatcher(group: group)  // takes partitions over from the first
        try await Task.sleep(for: .seconds(8))
        // Each holds the tokens of its own partitions only, and together all of them.
        let split = try await waitForValue {
            let (a, b) = (first.tokens.ownedPartitions, second.tokens.ownedPartitions)
            return a.isDisjoint(with: b) && a.union(b) == [0, 1, 2] && !a.isEmpty && !b.isEmpty
                && first.tokens.count + second.tokens.count == 18 ? (first.tokens.count, second.tokens.count) : nil
        }
        #expect(split.0 < 18 && split.1 < 18, "each holds its share, not the whole table")
        try await first.stop()  // gives its partitions to the second
        try await Task.sleep(for: .seconds(3))
        // The partitions that moved were read on the second: it holds every token now.
        _ = try await waitForValue { second.tokens.ownedPartitions == [0, 1, 2] && second.tokens.count == 18 ? true : nil }
        stream.cancel()
        _ = try? await stream.value
        rig.simulator.state.clearFaults()
        let requests = sent.withLock { $0 }
        let outcomes = try await rig.outcomes(for: Set(requests.map(\.requestId)), limit: .seconds(90))
        try await second.stop()
        let missing = Set(requests.map(\.requestId)).subtracting(outcomes.map(\.requestId))
        #expect(missing.isEmpty, "\(missing.count) of \(requests.count) requests without an outcome, e.g. \(Array(missing.prefix(3)))")
        let received = Dictionary(grouping: rig.simulator.state.notifications(), by: \.apnsID)
        let twice = requests.filter { (received[$0.requestId]?.count ?? 0) > 1 }
        #expect(twice.isEmpty, "\(twice.count) of \(requests.count) pushes reached APNs twice")
        let starts = requests.filter { $0.event == .start }
        #expect(!starts.isEmpty && starts.allSatisfy { received[$0.requestId]?.count == 1 }, "each push-to-start sent once")
        await rig.stop()
    }

    @Test("a dispatcher stopped mid-stream and another started: every request ends with an outcome, and no push-to-start is sent twice")
    func restartMidStream() async throws {
        let rig = try await Rig()
        for a in 0..<20 { try await rig.register("r\(a)", token: hexToken(200 + a)) }
        var ptsKeys: [String] = []
        for d in 0..<5 { ptsKeys.append(try await rig.registerPushToStart(device: "device-\(d)", token: hexToken(300 + d))) }
        var requests: [PushRequest] = []
        for s in 1...10 {
            for a in 0..<20 { requests.append(rig.request(activity: "r\(a)", sequence: Int64(s), priority: 5)) }
        }
        let starts = ptsKeys.map { rig.request(pushToStartKey: $0, event: .start, sequence: 1) }
        requests.insert(contentsOf: starts, at: 50)
        let group = "dispatcher-\(UUID())"
        let first = try await rig.startDispatcher(group: group)
        try await rig.send(Array(requests.prefix(120)))
        // Stop it once it is well into the stream.
        let early = Set(requests.prefix(30).map(\.requestId))
        _ = try await rig.outcomes(for: early)
        try await first.stop()
        try await rig.send(Array(requests.dropFirst(120)))
        let second = try await rig.startDispatcher(group: group)
        let outcomes = try await rig.outcomes(for: Set(requests.map(\.requestId)), limit: .seconds(90))
        #expect(Set(outcomes.map(\.requestId)) == Set(requests.map(\.requestId)), "every request has an outcome")
        for (d, start) in starts.enumerated() {
            #expect(rig.simulator.state.notifications(token: hexToken(300 + d)).filter { $0.apnsID == start.requestId }.count == 1, "push-to-start sent once")
        }
        // Duplicates at the phone, if any, carry the same apns-id and timestamp.
        let received = rig.simulator.state.notifications()
        for (_, copies) in Dictionary(grouping: received, by: \.apnsID) where copies.count > 1 {
            #expect(Set(copies.map(\.timestamp)).count == 1)
        }
        try await second.stop()
        await rig.stop()
    }
}
