import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Hummingbird
import IsletKafka
import IsletLinks
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing
@testable import ContentService
import SwiftProtobuf

private let logger = testLogger("islet.test.content-integration")

/// Reads `topic` from the start until every id in `ids` was seen as a push request and every
/// partition is read to its end (at most 60 s); returns every request read.
private func readRequests(_ topic: String, until ids: Set<String>) async throws -> [PushRequest] {
    let missing = Mutex(ids)
    let progress = try await TopicSnapshot.read([topic], bootstrapServers: try TestBroker.servers(), timeout: .seconds(60), logger: logger) {
        if let message = $0.latest {
            let request = try IsletJSON.decode(PushRequest.self, from: message.value ?? [])
            missing.withLock { _ = $0.remove(request.requestId) }
        }
        return $0.caughtUp && missing.withLock { $0.isEmpty }
    }
    return try progress.messages.map { try IsletJSON.decode(PushRequest.self, from: $0.value ?? []) }
}

/// content-service's topics for one test, created on the broker (2 partitions each; one for dead letters).
private func testTopics() async throws -> (ContentServiceApp.Topics, String) {
    var topics = ContentServiceApp.Topics()
    let suffix = UUID().uuidString.prefix(8).lowercased()
    topics.tokens = "test.tokens.\(suffix)"
    topics.activityEvents = "test.events.\(suffix)"
    topics.pushRequests = "test.requests.\(suffix)"
    topics.deadLetters = "test.dlq.\(suffix)"
    topics.pushOutcomes = "test.outcomes.\(suffix)"
    topics.contentMemory = "test.memory.\(suffix)"
    let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
    _ = try await admin.createTopics([
        .init(name: topics.tokens, partitions: 2, configs: ["cleanup.policy": "compact"]), .init(name: topics.activityEvents, partitions: 2),
        .init(name: topics.pushRequests, partitions: 2), .init(name: topics.deadLetters, partitions: 1),
        .init(name: topics.pushOutcomes, partitions: 2), .init(name: topics.contentMemory, partitions: 2, configs: ["cleanup.policy": "compact"]),
    ])
    return (topics, String(suffix))
}

@Suite("content-service against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(2)))
struct ContentServiceIntegrationTests {
    /// The gRPC key of the test's backend (read and write).
    static let backendKey = "an-orders-backend-key-of-32-characters-at-least"

    @Test("payloads are read again where the requests are, in one read of every partition concerned; another request at a stored position is not taken, and counts as lost")
    func payloadsReadAgain() async throws {
        let topic = uniqueName("test.requests")
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        _ = try await admin.createTopics([.init(name: topic, partitions: 2)])
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        var stored: [(PushRequest, KafkaPosition)] = []
        for index in 0..<12 {
            let request = PushRequest(
                requestId: UUID().uuidString.lowercased(), activityId: "order-\(index)", event: .update, app: app, attributesType: "DeliveryAttributes",
                payload: #"{"aps":{"event":"update","timestamp":\#(1_795_000_000 + index),"content-state":{"n":\#(index)}}}"#, priority: 5,
                urgency: .routine, supersedable: true, alerting: false, apnsTimestamp: Int64(1_795_000_000 + index), contentSequence: Int64(index),
                createdAt: Date())
            let report = try await producer.send(request, to: topic)
            stored.append((request, KafkaPosition(partition: report.partition, offset: try #require(report.offset))))
        }
        var wanted = stored.enumerated().filter { $0.offset % 3 == 0 }.map {
            ContentEngine.PayloadToRead(activityKey: "a\($0.offset)", position: $0.element.1, requestId: $0.element.0.requestId)
        }
        // Another request's id at a stored position: not its payload, and certainly not there.
        let other = ContentEngine.PayloadToRead(activityKey: "other", position: stored[1].1, requestId: UUID().uuidString.lowercased())
        wanted.append(other)
        let reader = RequestPayloads(bootstrapServers: try TestBroker.servers(), topic: topic, timeout: .seconds(10), metrics: ContentMetrics(), logger: logger)
        let read = await reader.read(wanted)
        #expect(Set(read.found.keys) == Set(wanted.map(\.activityKey)).subtracting(["other"]))
        #expect(read.lost == [other])
        for (index, (request, position)) in stored.enumerated() where index % 3 == 0 {
            #expect(read.found["a\(index)"]?.request.requestId == request.requestId)
            #expect(read.found["a\(index)"]?.request.payload == request.payload)
            #expect(read.found["a\(index)"]?.position == position)
        }
        producer.shutdown()
        _ = try? await producing.value
    }

    @Test("an activity's outcomes are read again one by one where they are, with the rest of the partition left unread; a position past the end is never an outcome")
    func outcomesReadAgain() async throws {
        let topic = uniqueName("test.outcomes")
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        _ = try await admin.createTopics([.init(name: topic, partitions: 2)])
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        var stored: [KafkaPosition: PushOutcome] = [:]
        for index in 0..<30 {
            let outcome = PushOutcome(
                requestId: UUID().uuidString.lowercased(), activityId: "order-\(index % 3)", result: index % 5 == 0 ? .coalesced : .delivered,
                apns: .init(status: 200), priorityUsed: 10, attempts: 1, completedAt: now.addingTimeInterval(Double(index)), bundleId: app.bundleId)
            let report = try await producer.send(outcome, to: topic)
            stored[KafkaPosition(partition: report.partition, offset: try #require(report.offset))] = outcome
        }
        let reader = OutcomeReader(bootstrapServers: try TestBroker.servers(), topic: topic, timeout: .seconds(4), metrics: ContentMetrics(), logger: logger)
        let wanted = Array(stored.keys.sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }.enumerated().filter { $0.offset % 7 == 0 }.map(\.element))
        let read = try await reader.read(wanted)
        #expect(Set(read.keys) == Set(wanted))
        for position in wanted { #expect(read[position] == stored[position]) }
        // A position no record has reached is never an outcome: a broker that answers it as out of
        // range (Kafka) has it read from the start and left out, like an expired one; one that
        // answers with nothing (tansu) leaves it unknown, and the lookup is to be asked again (503).
        let past = KafkaPosition(partition: 0, offset: 1_000_000)
        do {
            let again = try await reader.read([wanted[0], past])
            #expect(again[past] == nil && again[wanted[0]] == stored[wanted[0]])
        } catch {
            #expect(error.reason.contains("retry"))
        }
        producer.shutdown()
        _ = try? await producing.value
    }

    @Test("outcome lookups run four at a time in an instance: the fifth is refused at once, not queued")
    func outcomeLookupsBounded() async throws {
        // A cluster that never answers: each lookup takes its whole timeout.
        let reader = OutcomeReader(
            bootstrapServers: "127.0.0.1:1", timeout: .seconds(20), metrics: ContentMetrics(), logger: testLogger("islet.test.content-integration", level: .critical))
        let waiting = (0..<OutcomeReader.maximumLookups).map { index in
            Task { try? await reader.read([KafkaPosition(partition: 0, offset: Int64(index))]) }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while reader.lookupsRunning < OutcomeReader.maximumLookups, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(reader.lookupsRunning == OutcomeReader.maximumLookups)
        let refused = ContinuousClock.now
        let error = await #expect(throws: ActivityLookup.Unavailable.self) { _ = try await reader.read([KafkaPosition(partition: 0, offset: 9)]) }
        #expect(error?.reason.contains("too many") == true)
        #expect(ContinuousClock.now - refused < .seconds(1))
        for task in waiting { task.cancel() }
    }

    @Test("the memory is restored from the changelog, and the requests and outcomes are read from its checkpoints on")
    func restoredFromChangelog() async throws {
        let (topics, suffix) = try await testTopics()
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        let key = MessageKey.activity(bundleId: app.bundleId, activityId: "order-1")
        // A request of sequence 20, before the checkpoint: the changelog's memory (sequence 10)
        // says it is not to be read again; read, it would make sequence 15 below a stale event.
        let before = try await producer.send(
            PushRequest(
                requestId: UUID().uuidString.lowercased(), activityId: "order-1", event: .update, app: app, attributesType: "DeliveryAttributes",
                payload: #"{"aps":{"event":"update","timestamp":1795000020,"content-state":{"status":"x"}}}"#, priority: 5, urgency: .routine,
                supersedable: true, alerting: false, apnsTimestamp: 1_795_000_020, contentSequence: 20, createdAt: Date(), sourceEventId: "old-20",
                sourceActivityId: "order-1"),
            to: topics.pushRequests)
        let partition = before.partition
        let now = Date()
        let memory = ContentMemoryRecord(
            activity: .init(
                bundleId: app.bundleId, activityId: "order-1", partition: partition, lastSequence: 10, lastTimestamp: 1_795_000_010, lastState: "preparing",
                startedAt: now.addingTimeInterval(-60)),
            writtenAt: now)
        _ = try await producer.send(topic: topics.contentMemory, key: key, value: try IsletJSON.encode(memory), partition: partition)
        for changelogPartition in Int32(0)..<2 {
            let positions = (Int32(0)..<2).flatMap { p -> [ContentMemoryRecord.Position] in
                [
                    .init(topic: topics.pushRequests, partition: p, offset: p == partition ? (before.offset ?? 0) + 1 : 0),
                    .init(topic: topics.pushOutcomes, partition: p, offset: 0),
                ]
            }
            let checkpoint = ContentMemoryRecord(checkpoint: .init(partition: changelogPartition, positions: positions), writtenAt: now)
            _ = try await producer.send(
                topic: topics.contentMemory, key: ContentMemoryRecord.checkpointKey, value: try IsletJSON.encode(checkpoint), partition: changelogPartition)
        }

        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]),
            serviceName: "content-\(suffix)", defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: logger)
        let service = try ContentServiceApp(
            runtime: runtime,
            settings: ContentSettings(templatesDirectory: templatesDirectory, keyring: LinkKeyring(signing: linkKey), grpcHost: "127.0.0.1", grpcPort: 0),
            topics: topics)
        let group = runtime.makeServiceGroup(service.services)
        let running = Task { try await group.run() }
        for sequence: Int64 in [9, 15] {
            try await producer.send(
                ActivityEvent(
                    eventId: "e\(sequence)", activityId: "order-1", kind: .update, attributesType: "DeliveryAttributes",
                    fields: ["status": .string("out_for_delivery"), "orderId": .string("1")], urgency: .routine, occurredAt: Date(), sequence: sequence,
                    bundleId: app.bundleId),
                to: topics.activityEvents)
        }
        let made = RequestIds.content(bundleId: app.bundleId, activityId: "order-1", eventId: "e15")
        let requests = try await readRequests(topics.pushRequests, until: [made])
        #expect(requests.map(\.contentSequence) == [20, 15], "9 is older than the memory restored; 15 is newer (the request of 20 was not read)")
        #expect(service.engine.memory(of: key)?.lastSequence == 15)
        let startedAt = try #require(service.engine.memory(of: key)?.startedAt)
        #expect(abs(startedAt.timeIntervalSince(now.addingTimeInterval(-60))) < 0.002, "kept from the changelog (in milliseconds)")

        await group.triggerGracefulShutdown()
        try await running.value
        // The memory moved on is in the changelog.
        let written = try await TestBroker.readToEnd([topics.contentMemory]).compactMap { message in
            message.value.flatMap { try? IsletJSON.decode(ContentMemoryRecord.self, from: $0) }
        }
        #expect(written.last { $0.activity?.activityId == "order-1" }?.activity?.lastSequence == 15)
        producer.shutdown()
        try await producing.value
    }

    @Test("an instance holds the memories of the partitions it is assigned: read on assignment (their changelog, then what follows its checkpoint), followed while held, kept over a revocation that gives them back, forgotten when they went elsewhere")
    func partitionLocalMemory() async throws {
        let (topics, _) = try await testTopics()
        let servers = try TestBroker.servers()
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: servers), logger: logger)
        let producing = Task { try await producer.run() }
        // One activity in each partition of the activity topics.
        let ids = (0..<100).map { "order-\($0)" }
        let a = try #require(ids.first { KafkaPartitioner.partition(ofKey: $0, partitions: 2) == 0 })
        let b = try #require(ids.first { KafkaPartitioner.partition(ofKey: $0, partitions: 2) == 1 })
        let now = Date()
        func request(_ activity: String, _ sequence: Int64) -> PushRequest {
            PushRequest(
                requestId: "\(activity)-\(sequence)", activityId: activity, event: .update, app: app, attributesType: "DeliveryAttributes",
                payload: #"{"aps":{"event":"update","timestamp":\#(1_795_000_000 + sequence),"content-state":{"status":"x"}}}"#, priority: 5,
                urgency: .routine, supersedable: true, alerting: false, apnsTimestamp: 1_795_000_000 + sequence, contentSequence: sequence,
                createdAt: now, sourceEventId: "\(activity)-e\(sequence)", sourceActivityId: activity)
        }
        // The changelog: each activity's memory at sequence 10, each partition's checkpoint at the
        // requests' and outcomes' start; after it, sequence 11 of each and an outcome of a's.
        for (activity, partition) in [(a, Int32(0)), (b, Int32(1))] {
            let memory = ContentMemoryRecord(
                activity: .init(
                    bundleId: app.bundleId, activityId: activity, partition: partition, lastSequence: 10, lastTimestamp: 1_795_000_010,
                    lastState: "preparing", startedAt: now.addingTimeInterval(-60)),
                writtenAt: now)
            _ = try await producer.send(
                topic: topics.contentMemory, key: MessageKey.activity(bundleId: app.bundleId, activityId: activity), value: try IsletJSON.encode(memory),
                partition: partition)
            let positions = (Int32(0)..<2).flatMap { p -> [ContentMemoryRecord.Position] in
                [.init(topic: topics.pushRequests, partition: p, offset: 0), .init(topic: topics.pushOutcomes, partition: p, offset: 0)]
            }
            _ = try await producer.send(
                topic: topics.contentMemory, key: ContentMemoryRecord.checkpointKey,
                value: try IsletJSON.encode(ContentMemoryRecord(checkpoint: .init(partition: partition, positions: positions), writtenAt: now)),
                partition: partition)
            try await producer.send(request(activity, 11), to: topics.pushRequests)
        }
        try await producer.send(
            PushOutcome(requestId: "\(a)-11", activityId: a, result: .delivered, attempts: 1, completedAt: now, bundleId: app.bundleId),
            to: topics.pushOutcomes)

        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let ready = AwaitedLog<Bool>()
        let loader = ContentMemoryLoader(
            engine: engine, requestsTopic: topics.pushRequests, outcomesTopic: topics.pushOutcomes, changelogTopic: topics.contentMemory,
            since: now.addingTimeInterval(-3_600), metrics: ContentMetrics(), logger: logger,
            readEnds: ContentMemoryLoader.ends(bootstrapServers: servers, clientID: "test", settings: [:], logger: logger),
            makeReplica: ContentMemoryLoader.replicas(bootstrapServers: servers, clientID: "test", settings: [:], logger: logger)
        ) { ready.append(true) }
        let following = Task { try await loader.run() }
        try await withTimeout(.seconds(30), "the follower at the ends") { await ready.wait(for: 1) }
        let keyA = MessageKey.activity(bundleId: app.bundleId, activityId: a)
        let keyB = MessageKey.activity(bundleId: app.bundleId, activityId: b)
        #expect(engine.activityCount == 0, "nothing is read before an assignment")

        // Partition 0 assigned: a's memory from the changelog, moved on by what follows the checkpoint; b's not read.
        #expect(await loader.restore([0]) == [0])
        #expect(engine.memory(of: keyA)?.lastSequence == 11 && engine.memory(of: keyA)?.outcome(of: "\(a)-11") == .delivered)
        #expect(engine.memory(of: keyB) == nil, "another partition's activity")
        // Followed while held: a's next request is applied, b's is not.
        try await producer.send(request(a, 12), to: topics.pushRequests)
        try await producer.send(request(b, 12), to: topics.pushRequests)
        _ = try await waitForValue("a's request 12 followed") { engine.memory(of: keyA)?.lastSequence == 12 ? true : nil }
        #expect(engine.memory(of: keyB) == nil)

        // Revoked, then given back: kept, nothing read again.
        loader.revoked([0])
        #expect(await loader.restore([0]) == [])
        #expect(engine.memory(of: keyA)?.lastSequence == 12)
        // Revoked, then partition 1 assigned instead: a's forgotten, b's read (with its request 12, after the checkpoint).
        loader.revoked([0])
        #expect(await loader.restore([1]) == [1])
        #expect(engine.memory(of: keyA) == nil && loader.heldPartitions == [1])
        #expect(engine.memory(of: keyB)?.lastSequence == 12)

        following.cancel()
        _ = try? await following.value
        producer.shutdown()
        try await producing.value
    }

    @Test("a changelog round writes each changed memory once, then the checkpoint; nothing when nothing changed; a revoked partition is written by its revocation and by no round after")
    func changelogRounds() async throws {
        let topic = uniqueName("test.memory")
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        _ = try await admin.createTopics([.init(name: topic, partitions: 2, configs: ["cleanup.policy": "compact"])])
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let sender = RequestSender(producer: producer, engine: engine, metrics: ContentMetrics(), logger: logger)
        sender.own([0, 1])
        engine.trackChanges(of: [0, 1])
        let requests = KafkaTopicPartition(topic: "test.requests", partition: 0)
        let positions = ReadPositions([requests: 7])
        let writer = ChangelogWriter(engine: engine, sender: sender, producer: producer, positions: positions, topic: topic, logger: logger)
        func update(_ activity: String, _ sequence: Int64, partition: Int32) throws {
            var event = event("DeliveryAttributes", sequence: sequence, ["status": .string("preparing"), "orderId": .string("1")])
            event.activityId = activity
            event.eventId = "\(activity)-\(sequence)"
            guard case .send(let prepared) = try engine.prepare(event, partition: partition) else { throw ContentError(field: "event", problem: "ignored") }
            engine.commit(prepared)
        }
        func records() async throws -> [(partition: Int32, record: ContentMemoryRecord)] {
            try await TestBroker.readToEnd([topic]).map { ($0.partition, try IsletJSON.decode(ContentMemoryRecord.self, from: $0.value ?? [])) }
        }

        try update("a", 1, partition: 0)
        try update("a", 2, partition: 0)
        try update("b", 1, partition: 1)
        #expect(await writer.write() == 2)
        var written = try await records()
        #expect(written.count == 4, "a and b once each, and a checkpoint in each partition")
        #expect(written.first { $0.record.activity?.activityId == "a" }.map { $0.partition == 0 && $0.record.activity?.lastSequence == 2 } == true)
        #expect(written.filter { $0.record.checkpoint?.positions == [.init(topic: "test.requests", partition: 0, offset: 7)] }.map(\.partition).sorted() == [0, 1])

        #expect(await writer.write() == 0)
        #expect(try await records().count == 4, "nothing changed, the positions did not move: nothing written")

        // A memory changed, the positions did not move: the memory, then its partition's checkpoint all the same.
        try update("b", 2, partition: 1)
        #expect(await writer.write() == 1)
        written = try await records()
        let partition1 = written.filter { $0.partition == 1 }.map(\.record)
        #expect(written.count == 6 && partition1.count == 4)
        #expect(partition1.suffix(2).map { $0.activity?.lastSequence } == [2, nil] && partition1.last?.checkpoint != nil)

        // Partition 1 revoked: its change is written by the revocation; a round after it writes nothing of it.
        try update("b", 3, partition: 1)
        await writer.revoked([1], within: .seconds(3))
        #expect(!sender.ownedPartitions.contains(1))
        try update("b", 4, partition: 1)
        #expect(await writer.write() == 0)
        written = try await records()
        #expect(written.count == 8)
        #expect(written.last { $0.record.activity?.activityId == "b" }?.record.activity?.lastSequence == 3)
        #expect(writer.failure == nil)
        producer.shutdown()
        try await producing.value
    }

    @Test("events become push requests for the token's app version; duplicates and old sequences are skipped; bad events are dead letters")
    func eventsToRequests() async throws {
        let (topics, suffix) = try await testTopics()
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        let registered = Date()
        // An old app (1.0) holds the activity's token.
        try await producer.send(
            TokenRecord(
                kind: .update, activityId: "order-7", userId: "u", token: String(repeating: "ab", count: 40), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: registered,
                updatedAt: registered),
            to: topics.tokens)

        /// A content-service instance in consumer group `name`.
        func start(_ name: String) throws -> (ContentServiceApp, ServiceGroup, Task<Void, any Error>) {
            let settings = try ServiceSettings(
                from: .variables(["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]),
                serviceName: name, defaultHTTPPort: 0)
            let runtime = ServiceRuntime(settings: settings, logger: logger)
            let service = try ContentServiceApp(
                runtime: runtime,
                settings: ContentSettings(
                    templatesDirectory: templatesDirectory, keyring: LinkKeyring(signing: linkKey), grpcHost: "127.0.0.1", grpcPort: 0,
                    backendKeys: try BackendKeys(["orders": Self.backendKey + ":read+write"])),
                topics: topics)
            let group = runtime.makeServiceGroup(service.services)
            return (service, group, Task { try await group.run() })
        }
        let (service, group, running) = try start("content-\(suffix)")

        func send(_ sequence: Int64, _ status: String, kind: ActivityEventKind = .update, type: String = "DeliveryAttributes") async throws {
            try await producer.send(
                ActivityEvent(
                    eventId: "e\(sequence)-\(status)", activityId: "order-7", kind: kind, attributesType: type,
                    fields: ["status": .string(status), "orderId": .string("7"), "courier": .object(["name": .string("Ana")])], urgency: .important,
                    occurredAt: Date(), sequence: sequence),
                to: topics.activityEvents)
        }
        try await send(1, "preparing")
        try await send(1, "preparing")  // duplicate
        try await send(3, "out_for_delivery")
        try await send(2, "courier_assigned")  // older than the last applied
        try await send(4, "x", type: "PizzaAttributes")  // no template
        try await producer.send(topic: topics.activityEvents, key: "order-7", value: Array("{not json".utf8))
        try await send(5, "delivered", kind: .end)

        let requests = try await TestBroker.read(topics.pushRequests, count: 4).map { try IsletJSON.decode(PushRequest.self, from: $0.value ?? []) }
        #expect(requests.map(\.event) == [.update, .update, .update, .end])
        #expect(requests.map(\.contentSequence) == [1, 3, 5, 5])
        #expect(requests.map(\.alerting) == [false, true, true, false])
        #expect(requests.allSatisfy { $0.activityId == "order-7" && $0.app == app })
        let stamps = requests.map(\.apnsTimestamp)
        #expect(stamps == stamps.sorted(), "timestamps never go back")
        // The 1.0 app gets exactly the fields it decodes, and no layout.
        let payload = try JSONDecoder().decode(JSONValue.self, from: Data(requests[0].payload.utf8))
        guard case .object(let state)? = payload["aps"]?["content-state"] else {
            Issue.record("no content-state")
            return
        }
        #expect(Set(state.keys) == ["status", "headline", "etaAt"])

        let deadLetters = try await TestBroker.read(topics.deadLetters, count: 2).map { try IsletJSON.decode(DeadLetterRecord.self, from: $0.value ?? []) }
        #expect(Set(deadLetters.map(\.reason)) == [.unprocessable, .undecodable])
        #expect(deadLetters.contains { $0.detail.contains("PizzaAttributes") })

        // gRPC: a push-to-start through the running service; the answer names the request the
        // owner then makes. An invalid call names the field.
        let port = try #require(try await service.grpc.listeningPort)
        let startIds = try await withGRPCClient(
            transport: .http2NIOPosix(target: .ipv4(address: "127.0.0.1", port: port), transportSecurity: .plaintext)
        ) { client in
            let activities = Islet_Content_V1_ActivityService.Client(wrapping: client)
            var start = Islet_Content_V1_ActivityEventRequest.with {
                $0.eventID = "grpc-1"
                $0.activityID = "order-8"
                $0.attributesType = "DeliveryAttributes"
                $0.urgency = "important"
                $0.sequence = 1
                $0.fields = .with { $0.fields = ["status": .init(stringValue: "placed"), "orderId": .init(stringValue: "8")] }
                $0.startTarget = .with { $0.bundleID = app.bundleId; $0.deviceID = "device-1" }
            }
            // Until the service has rebuilt its tables it answers UNAVAILABLE; it is ready here.
            let reply = try await activities.start(start, metadata: ["authorization": "Bearer \(Self.backendKey)"])
            start.eventID = "grpc-bad"
            start.fields.fields["status"] = .init(numberValue: 3.5)
            await #expect { _ = try await activities.start(start, metadata: ["authorization": "Bearer \(Self.backendKey)"]) } throws: {
                ($0 as? RPCError)?.code == .invalidArgument && ($0 as? RPCError)?.message.hasPrefix("fields.status") == true
            }
            return reply.requestIds
        }
        #expect(startIds == [RequestIds.content(bundleId: app.bundleId, activityId: "order-8", eventId: "grpc-1")])
        let afterGRPC = try await readRequests(topics.pushRequests, until: Set(startIds))
        let pushToStart = try #require(afterGRPC.first { $0.requestId == startIds[0] })
        #expect(pushToStart.event == .start && pushToStart.pushToStartKey != nil && pushToStart.sourceActivityId == "order-8")

        await group.triggerGracefulShutdown()
        try await running.value

        // Stopping, it wrote its memories to the changelog (order-7 ended at sequence 5), and a
        // checkpoint in each partition.
        let changelog = try await TestBroker.readToEnd([topics.contentMemory]).compactMap { message in
            message.value.flatMap { try? IsletJSON.decode(ContentMemoryRecord.self, from: $0) }
        }
        let order7 = try #require(changelog.last { $0.activity?.activityId == "order-7" }?.activity)
        #expect(order7.lastSequence == 5 && order7.ended && order7.latest?.contentSequence == 5 && order7.payloadStoredAt != nil,
            "what is kept of the latest request, which is on the requests topic")
        #expect(Set(changelog.compactMap(\.checkpoint?.partition)) == [0, 1])

        // A new instance in a new consumer group reads every event again from the start: its memory,
        // restored from the changelog, recognises them all. Only the two new events count.
        let (_, secondGroup, secondRunning) = try start("content-\(suffix)-restarted")
        try await send(6, "preparing", kind: .start)
        try await producer.send(
            ActivityEvent(
                eventId: "grpc-2", activityId: "order-8", kind: .update, attributesType: "DeliveryAttributes",
                fields: ["status": .string("preparing"), "orderId": .string("8")], urgency: .routine, occurredAt: Date(), sequence: 2),
            to: topics.activityEvents)
        let newIds: Set<String> = [
            RequestIds.content(bundleId: app.bundleId, activityId: "order-7", eventId: "e6-preparing"),
            RequestIds.content(bundleId: app.bundleId, activityId: "order-8", eventId: "grpc-2"),
        ]
        let all = try await readRequests(topics.pushRequests, until: newIds)
        #expect(afterGRPC.count == requests.count + 1, "the four requests of order-7 and order-8's push-to-start")
        #expect(all.count == afterGRPC.count + 2, "\(all.map { ($0.sourceActivityId ?? "?", $0.contentSequence) })")
        #expect(Set(all.map(\.requestId)).count == all.count, "no request was made twice")
        await secondGroup.triggerGracefulShutdown()
        try await secondRunning.value
        producer.shutdown()
        try await producing.value
    }

    @Test("an activity waiting for its image holds up only its own lane: other activities' events go on, and its own follow in order")
    func lanes() async throws {
        let (topics, suffix) = try await testTopics()
        // The image server: held.png answers only once the test says so.
        let (asked, askedContinuation) = AsyncStream.makeStream(of: Void.self)
        let (release, releaseContinuation) = AsyncStream.makeStream(of: Void.self)
        let picture = bands(width: 120, height: 120, png: true)
        let router = Router()
        router.get("held.png") { _, _ -> Response in
            askedContinuation.yield()
            for await _ in release {}
            return Response(status: .ok, headers: [.contentType: "image/png"], body: .init(byteBuffer: ByteBuffer(bytes: picture)))
        }
        let (ports, bound) = AsyncStream.makeStream(of: Int.self)
        let images = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in if let port = channel.localAddress?.port { bound.yield(port) } }, logger: logger)
        let serving = Task { try await images.runService() }
        var waiting = ports.makeAsyncIterator()
        let host = "127.0.0.1:\(try #require(await waiting.next()))"

        let producer = try KafkaProducer(configuration: .init(bootstrapServers: try TestBroker.servers()), logger: logger)
        let producing = Task { try await producer.run() }
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": try TestBroker.servers(), "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]),
            serviceName: "content-lanes-\(suffix)", defaultHTTPPort: 0)
        var contentSettings = ContentSettings(
            templatesDirectory: templatesDirectory, keyring: LinkKeyring(signing: linkKey), grpcHost: "127.0.0.1", grpcPort: 0)
        contentSettings.thumbnails = ThumbnailService.Settings(allowedHosts: [host])
        contentSettings.thumbnails.timeout = .seconds(60)
        let runtime = ServiceRuntime(settings: settings, logger: logger)
        let service = try ContentServiceApp(runtime: runtime, settings: contentSettings, topics: topics)
        let group = runtime.makeServiceGroup(service.services)
        let running = Task { try await group.run() }

        func send(_ activityId: String, _ sequence: Int64, photo: String? = nil) async throws {
            var courier: [String: JSONValue] = ["name": .string("Ana")]
            if let photo { courier["photoUrl"] = .string(photo) }
            try await producer.send(
                ActivityEvent(
                    eventId: "\(activityId)-\(sequence)", activityId: activityId, kind: .update,
                    attributesType: "DeliveryAttributes", fields: ["status": .string("preparing"), "orderId": .string("1"), "courier": .object(courier)],
                    urgency: .routine, occurredAt: Date(), sequence: sequence, bundleId: app.bundleId),
                to: topics.activityEvents)
        }
        // The slow activity's first event waits for its image; its second follows it in its lane.
        let lanes = ContentLanes.defaultWorkers
        let slow = "slow-order"
        try await send(slow, 1, photo: "http://\(host)/held.png")
        var askedIterator = asked.makeAsyncIterator()
        _ = await askedIterator.next()
        try await send(slow, 2, photo: "http://\(host)/held.png")
        // Five other activities, none in the slow one's lane: they go on meanwhile.
        let others = (0..<100).map { "order-\($0)" }.filter {
            ContentLanes.lane(of: $0, among: lanes) != ContentLanes.lane(of: slow, among: lanes)
        }.prefix(5)
        for activity in others { try await send(activity, 1) }
        let first = try await TestBroker.read(PushRequest.self, from: topics.pushRequests, count: 5)
        #expect(Set(first.compactMap(\.sourceActivityId)) == Set(others), "only the other activities' requests, while the image is held")

        releaseContinuation.finish()
        let all = try await TestBroker.read(PushRequest.self, from: topics.pushRequests, count: 7)
        let slowRequests = all.filter { $0.sourceActivityId == slow }
        #expect(slowRequests.map(\.contentSequence) == [1, 2], "the slow activity's requests, in order")
        #expect(slowRequests.first?.payload.contains(#""data":""#) == true, "its first payload has the thumbnail inline")
        #expect(all.count == 7)

        await group.triggerGracefulShutdown()
        try await running.value
        serving.cancel()
        _ = try? await serving.value
        producer.shutdown()
        try await producing.value
    }
}
