// islet-content-bench: content-service's figures for docs/PERFORMANCE.md (scripts/bench-content.sh).
//   assembly  — payload assembly per event in process, without and with an inline thumbnail, and
//               the thumbnail itself (libgd: decode 640×480 JPEG, crop, scale, encode);
//   restore   — the activity memory rebuilt at start: from the changelog, and from the requests and
//               outcomes (scripts/bench-content.sh --restore);
//   steps     — scheduled steps (ActivityEvent.at): the cost of keeping one (CPU to schedule it, resident
//               bytes), of the sender's look when none is due with a million kept, and of sending one at its time;
//   pipeline  — events per second through one in-process instance against the broker (event read →
//               push request acknowledged), next to a pass-through that reads the same events and
//               writes them back (same librdkafka settings, same in-order marking): the ratio is
//               what the content work costs on top of Kafka in and out.
import ArgumentParser
import ContentService
import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

let benchLogger: Logger = {
    var logger = Logger(label: "islet.content-bench")
    logger.logLevel = .error
    return logger
}()

@main
struct ContentBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-content-bench", abstract: "Measure content-service.", subcommands: [Assembly.self, Pipeline.self, Restore.self, Memory.self, Steps.self])
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

func deliveryEvent(activity: Int, sequence: Int64, photo: String? = nil) -> ActivityEvent {
    var courier: [String: JSONValue] = ["name": .string("Ana María")]
    if let photo { courier["photoUrl"] = .string(photo) }
    let statuses = ["preparing", "courier_assigned", "out_for_delivery", "arriving"]
    return ActivityEvent(
        eventId: "bench-\(activity)-\(sequence)", activityId: "order-\(activity)", kind: .update, attributesType: "DeliveryAttributes",
        fields: [
            "status": .string(statuses[Int(sequence) % statuses.count]), "orderId": .string("\(activity)"), "storeName": .string("Casa Lola"),
            "courier": .object(courier), "progress": .integer(sequence % 100), "etaAt": .string("2026-11-23T12:41:00.000Z"),
        ],
        urgency: .routine, occurredAt: Date(), sequence: sequence)
}

func makeEngine(templates: String, tokens: PartitionTokens = .whole()) throws -> ContentEngine {
    let key = try LinkKey(id: "bench", secret: Array("a-benchmark-link-key-of-32-bytes!".utf8))
    return ContentEngine(
        assembler: PayloadAssembler(templates: try TemplateLoader.load(directory: templates), keyring: LinkKeyring(signing: key)), tokens: tokens)
}

/// A 640×480 photo-like JPEG made with libgd (gradients, so it compresses like a picture).
func samplePhoto() -> [UInt8] {
    let image = RasterImage(width: 640, height: 480)!
    for y in 0..<480 {
        for x in 0..<640 { image.setPixel(x: x, y: y, colour: (x * 255 / 640) << 16 | (y * 255 / 480) << 8 | ((x ^ y) & 0xFF)) }
    }
    return image.jpeg(quality: 85)!
}

struct Assembly: ParsableCommand {
    @Option var templates = "Services/ContentService/Templates"
    @Option var events = 20_000
    @Option var rounds = 5

    func run() throws {
        let photo = samplePhoto()
        let url = "https://img.example.com/courier.jpg"
        var plain: [Double] = []
        var withImage: [Double] = []
        var thumbnail: [Double] = []
        var apiEvent: [String: [Double]] = [:]
        var bytes: (Int, Int) = (0, 0)
        for _ in 0..<rounds {
            // Without an image: 1,000 activities, each event an update of one of them.
            var engine = try makeEngine(templates: templates)
            var started = ContinuousClock.now
            for i in 0..<events {
                guard case .send(let prepared) = try engine.prepare(deliveryEvent(activity: i % 1_000, sequence: Int64(i / 1_000 + 1))) else {
                    fatalError("not sent")
                }
                engine.commit(prepared)
                bytes.0 = prepared.requests[0].payload.utf8.count
            }
            plain.append((ContinuousClock.now - started) / .microseconds(1) / Double(events))

            // With an image inlined: every event is a new activity's first (so it carries the picture).
            let images = [url: try Thumbnailer.thumbnails(of: photo).map { Data($0).base64EncodedString() }]
            engine = try makeEngine(templates: templates)
            started = ContinuousClock.now
            for i in 0..<events {
                guard case .send(let prepared) = try engine.prepare(deliveryEvent(activity: i, sequence: 1, photo: url), images: images) else {
                    fatalError("not sent")
                }
                engine.commit(prepared)
                bytes.1 = prepared.requests[0].payload.utf8.count
            }
            withImage.append((ContinuousClock.now - started) / .microseconds(1) / Double(events))

            // An event posted to the API of the instance that owns it, then read back from Kafka:
            // checked (assembled) at the API, then prepared and committed by the loop. As before
            // issue 59's change (the check a dry run, assembled again at the read) and now (the
            // check's assembly used at the read), alternating in each round.
            for reuse in [false, true] {
                engine = try makeEngine(templates: templates)
                started = ContinuousClock.now
                for i in 0..<events {
                    let event = deliveryEvent(activity: i % 1_000, sequence: Int64(i / 1_000 + 1))
                    _ = reuse ? try engine.prepareAhead(event, partition: nil) : try engine.prepare(event)
                    guard case .send(let prepared) = try engine.prepare(event) else { fatalError("not sent") }
                    engine.commit(prepared)
                }
                apiEvent[reuse ? "once" : "twice", default: []].append((ContinuousClock.now - started) / .microseconds(1) / Double(events))
            }
            if engine.eventsAssembledOnce != events { fatalError("\(engine.eventsAssembledOnce) of \(events) events assembled once") }

            let count = max(events / 50, 50)
            started = ContinuousClock.now
            for _ in 0..<count { _ = try Thumbnailer.thumbnails(of: photo) }
            thumbnail.append((ContinuousClock.now - started) / .microseconds(1) / Double(count))
        }
        // Reading them back as the services do: the event (content-service), the request
        // (content-service's memory, the dispatcher), the payload as a JSON tree (the APNs simulator).
        let event = try IsletJSON.encode(deliveryEvent(activity: 1, sequence: 7))
        let engine = try makeEngine(templates: templates)
        guard case .send(let prepared) = try engine.prepare(deliveryEvent(activity: 1, sequence: 7)) else { fatalError("not sent") }
        let request = try IsletJSON.encode(prepared.requests[0])
        let payload = Array(prepared.requests[0].payload.utf8)
        var decode: [String: [Double]] = [:]
        for _ in 0..<rounds {
            let count = events
            var started = ContinuousClock.now
            for _ in 0..<count { _ = try IsletJSON.decode(ActivityEvent.self, from: event) }
            decode["event", default: []].append((ContinuousClock.now - started) / .microseconds(1) / Double(count))
            started = ContinuousClock.now
            for _ in 0..<count { _ = try IsletJSON.decode(PushRequest.self, from: request) }
            decode["request", default: []].append((ContinuousClock.now - started) / .microseconds(1) / Double(count))
            started = ContinuousClock.now
            for _ in 0..<count { _ = try IsletJSON.decodeValue(JSONValue.self, from: payload) }
            decode["payload", default: []].append((ContinuousClock.now - started) / .microseconds(1) / Double(count))
        }
        print(String(format: "assembly_us_per_event=%.1f payload_bytes=%d", median(plain), bytes.0))
        print(String(format: "decode_us event=%.1f request=%.1f payload_tree=%.1f (bytes %d, %d, %d)",
            median(decode["event"]!), median(decode["request"]!), median(decode["payload"]!), event.count, request.count, payload.count))
        print(String(format: "api_event_us twice=%.1f once=%.1f (checked at the API, read back, committed)", median(apiEvent["twice"]!), median(apiEvent["once"]!)))
        print(String(format: "assembly_with_thumbnail_us_per_event=%.1f payload_bytes=%d", median(withImage), bytes.1))
        print(String(format: "thumbnail_us_per_image=%.1f source_bytes=%d ladder=%d", median(thumbnail), photo.count, Thumbnailer.ladder.count))
    }
}

struct Pipeline: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var templates = "Services/ContentService/Templates"
    @Option var events = 20_000
    @Option var partitions = 4
    @Flag(help: "Measure content-service before the pass-through (the scripts alternate: the broker holds more the second time).")
    var contentFirst = false

    func run() async throws {
        let suffix = UUID().uuidString.prefix(8).lowercased()
        var topics = ContentServiceApp.Topics()
        topics.tokens = "bench.tokens.\(suffix)"
        topics.activityEvents = "bench.events.\(suffix)"
        topics.pushRequests = "bench.requests.\(suffix)"
        topics.pushOutcomes = "bench.outcomes.\(suffix)"
        topics.deadLetters = "bench.dlq.\(suffix)"
        let passThrough = "bench.passthrough.\(suffix)"
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: benchLogger)
        _ = try await admin.createTopics(
            [topics.activityEvents, topics.pushRequests, topics.pushOutcomes, topics.deadLetters, passThrough].map { .init(name: $0, partitions: partitions) }
                + [.init(name: topics.tokens, partitions: partitions, configs: ["cleanup.policy": "compact"])])

        // The load: `events` updates over 1,000 activities, on the topic before anyone reads.
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: benchLogger)
        let producing = Task { try await producer.run() }
        let (eventsTopic, count) = (topics.activityEvents, events)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<count {
                let event = deliveryEvent(activity: i % 1_000, sequence: Int64(i / 1_000 + 1))
                group.addTask { _ = try await producer.send(event, to: eventsTopic) }
                if i % 2_000 == 1_999 { try await group.waitForAll() }
            }
            try await group.waitForAll()
        }

        // content-service's settings, for it and for the pass-through alike: the same consumer
        // settings and the same producer settings (linger.ms=1, the send timeout), each side its own
        // group and producer.
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": bootstrap, "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]),
            serviceName: "bench-content-\(suffix)", defaultHTTPPort: 0)
        let key = try LinkKey(id: "bench", secret: Array("a-benchmark-link-key-of-32-bytes!".utf8))
        let contentSettings = ContentSettings(templatesDirectory: templates, keyring: LinkKeyring(signing: key), grpcHost: "127.0.0.1", grpcPort: 0)

        // Reference: read the events and write them back, marking in order once acknowledged.
        func passThroughRate() async throws -> (rate: Double, cpu: Double) {
            let passProducer = try KafkaProducer(
                configuration: ContentServiceApp.producerConfiguration(settings.producerConfiguration(), sendTimeout: contentSettings.sendTimeout), logger: benchLogger)
            let passProducing = Task { try await passProducer.run() }
            let rate = try await measure(topic: passThrough) {
                let consumer = try KafkaConsumer(
                    configuration: settings.consumerConfiguration(topics: [topics.activityEvents], group: "bench-pass-\(suffix)"), logger: benchLogger)
                let tracker = OffsetTracker()
                return Task {
                    try await withThrowingDiscardingTaskGroup { group in
                        group.addTask { try await consumer.run() }
                        for await message in consumer.messages {
                            tracker.begin(message)
                            while true {
                                do {
                                    try passProducer.produce(topic: passThrough, key: message.key, value: message.value) { result in
                                        if case .success = result, let release = tracker.complete(message) { consumer.markProcessed(release) }
                                    }
                                    break
                                } catch let error as KafkaError where error.isQueueFull {
                                    await passProducer.waitForCapacity()
                                }
                            }
                        }
                    }
                } as Task<Void, any Error>
            } stop: { (task: Task<Void, any Error>) in task.cancel() }
            passProducer.shutdown()
            _ = try? await passProducing.value
            return rate
        }

        // content-service, in process.
        func contentRate() async throws -> (rate: Double, cpu: Double) {
            let runtime = ServiceRuntime(settings: settings, logger: benchLogger)
            return try await measure(topic: topics.pushRequests) {
                let app = try ContentServiceApp(runtime: runtime, settings: contentSettings, topics: topics)
                let group = runtime.makeServiceGroup(app.services)
                return (group, Task { try await group.run() })
            } stop: { running in
                await running.0.triggerGracefulShutdown()
                _ = try? await running.1.value
            }
        }
        let content: (rate: Double, cpu: Double)
        let reference: (rate: Double, cpu: Double)
        if contentFirst {
            content = try await contentRate()
            reference = try await passThroughRate()
        } else {
            reference = try await passThroughRate()
            content = try await contentRate()
        }
        producer.shutdown()
        _ = try? await producing.value
        print(String(format: "passthrough_events_per_s=%.0f passthrough_cpu_us_per_event=%.1f", reference.rate, reference.cpu))
        print(String(format: "content_events_per_s=%.0f content_cpu_us_per_event=%.1f ratio=%.2f", content.rate, content.cpu, content.rate / reference.rate))
    }

    /// Starts a reader of `topic`, then the system under test; the rate is the records of `topic`
    /// between the first and the `events`-th read, per second (a group's join time is not counted),
    /// and the process's CPU time over the same span per record (the side measured and the reader:
    /// the reader costs both sides the same).
    func measure<Running>(
        topic: String, start: () async throws -> Running, stop: (Running) async throws -> Void
    ) async throws -> (rate: Double, cpu: Double) {
        let reader = try KafkaConsumer(configuration: .replica(bootstrapServers: bootstrap, topics: [topic]), logger: benchLogger)
        let reading = Task { try await reader.run() }
        let running = try await start()
        var first: ContinuousClock.Instant?
        var count = 0
        var last = ContinuousClock.now
        var cpu = (first: 0.0, last: 0.0)
        for await _ in reader.messages {
            last = ContinuousClock.now
            if first == nil { (first, cpu.first) = (last, try cpuSeconds(pid: getpid())) }
            count += 1
            if count >= events { break }
        }
        cpu.last = try cpuSeconds(pid: getpid())
        reader.shutdown()
        _ = try? await reading.value
        try await stop(running)
        guard let first, count > 1 else { return (0, 0) }
        return (Double(count - 1) / ((last - first) / .seconds(1)), (cpu.last - cpu.first) * 1e6 / Double(count - 1))
    }
}

/// How long content-service takes to rebuild its activity memory at start, against the broker:
/// from its changelog (`islet.content-memory.v1` to its end, then the records after the
/// checkpoints) next to the way without one (every push request and outcome of the retention),
/// in alternating rounds, over the same history: `activities` activities with `history` requests
/// each and an outcome per request, as content-service and the dispatcher write them.
struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Memory restore at start: from the changelog, and from the requests and outcomes.")

    @Option var bootstrap: String
    @Option var templates = "Services/ContentService/Templates"
    @Option var activities = 100_000
    @Option(help: "Requests per activity in the history (each with its outcome).") var history = 4
    @Option var partitions = 4
    @Option var rounds = 3
    @Option(help: "Writes of the history in flight at once.") var lanes = 1_024
    @Option(help: "The broker's pid: its CPU time is reported too.") var brokerPid: Int32?

    func run() async throws {
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let (requestsTopic, outcomesTopic, memoryTopic) = ("bench.requests.\(suffix)", "bench.outcomes.\(suffix)", "bench.memory.\(suffix)")
        // The way without a changelog reads an empty one: no checkpoint, so the records of the retention.
        let emptyMemoryTopic = "bench.memory-empty.\(suffix)"
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: benchLogger)
        _ = try await admin.createTopics([
            .init(name: requestsTopic, partitions: partitions), .init(name: outcomesTopic, partitions: partitions),
            .init(name: memoryTopic, partitions: partitions, configs: ["cleanup.policy": "compact"]),
            .init(name: emptyMemoryTopic, partitions: partitions, configs: ["cleanup.policy": "compact"]),
        ])
        var producerConfiguration = KafkaProducerConfiguration(bootstrapServers: bootstrap)
        producerConfiguration.settings["linger.ms"] = "20"
        let producer = try KafkaProducer(configuration: producerConfiguration, logger: benchLogger)
        let producing = Task { try await producer.run() }
        let since = Date().addingTimeInterval(-60)

        // The history, written as the services write it, and applied to an engine as content-service
        // would have: the memory its changelog is then written from.
        let source = try makeEngine(templates: templates)
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        final class Ends: Sendable { let positions = Mutex<[KafkaTopicPartition: Int64]>([:]) }
        let ends = Ends()
        let generated = ContinuousClock.now
        let filler = String(repeating: "x", count: 600)
        let (activities, lanes) = (self.activities, self.lanes)
        for round in 0..<history {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<lanes {
                    group.addTask {
                        for activity in stride(from: lane, to: activities, by: lanes) {
                            let requestId = "r-\(activity)-\(round)"
                            let request = PushRequest(
                                requestId: requestId, activityId: "order-\(activity)", event: .update, app: app,
                                attributesType: "DeliveryAttributes",
                                payload: #"{"aps":{"event":"update","timestamp":\#(1_795_000_000 + round),"content-state":{"status":"s\#(round)","note":"\#(filler)"}}}"#,
                                priority: 5, urgency: .routine, supersedable: true, alerting: false, apnsTimestamp: Int64(1_795_000_000 + round),
                                contentSequence: Int64(round + 1), createdAt: Date(), sourceEventId: "e-\(activity)-\(round)",
                                sourceActivityId: "order-\(activity)", state: "s\(round)")
                            let stored = try await producer.send(request, to: requestsTopic)
                            source.replay(request, partition: stored.partition, storedAt: stored.position)
                            let outcome = PushOutcome(
                                requestId: requestId, activityId: "order-\(activity)", result: .delivered, attempts: 1, completedAt: Date(), bundleId: app.bundleId)
                            let answered = try await producer.send(outcome, to: outcomesTopic)
                            source.record(outcome)
                            ends.positions.withLock { ends in
                                for report in [stored, answered] {
                                    guard let offset = report.offset else { continue }
                                    let partition = KafkaTopicPartition(topic: report.topic, partition: report.partition)
                                    ends[partition] = max(ends[partition] ?? 0, offset + 1)
                                }
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        print("history: \(activities) activities × \(history) requests and outcomes written in \(ContinuousClock.now - generated)")
        let sender = RequestSender(producer: producer, engine: source, topic: requestsTopic, metrics: ContentMetrics(), logger: benchLogger)
        let writer = ChangelogWriter(
            engine: source, sender: sender, producer: producer, positions: ReadPositions(ends.positions.withLock { $0 }), topic: memoryTopic, logger: benchLogger)
        let written = ContinuousClock.now
        sender.own(Array(0..<Int32(partitions)))
        let memories = await writer.write()
        guard writer.failure == nil, memories == activities else {
            throw ValidationError("the changelog was not written: \(memories) memories, \(writer.failure ?? "")")
        }
        print("changelog: \(memories) memories and \(partitions) checkpoints written in \(ContinuousClock.now - written)")

        var figures: [String: [(seconds: Double, cpu: Double, broker: Double)]] = [:]
        for round in 1...rounds {
            for way in ["changelog", "replay"] {
                let engine = try makeEngine(templates: templates)
                let ready = AsyncStream<Void>.makeStream()
                let loader = ContentMemoryLoader(
                    engine: engine, requestsTopic: requestsTopic, outcomesTopic: outcomesTopic,
                    changelogTopic: way == "changelog" ? memoryTopic : emptyMemoryTopic, since: since, metrics: ContentMetrics(), logger: benchLogger,
                    readEnds: ContentMemoryLoader.ends(bootstrapServers: bootstrap, clientID: "bench", settings: [:], logger: benchLogger),
                    makeReplica: ContentMemoryLoader.replicas(bootstrapServers: bootstrap, clientID: "bench", settings: [:], logger: benchLogger),
                    onReady: { ready.continuation.yield() })
                // The follower at the ends first (as a service starts), then every partition
                // assigned: what an instance taking them all over reads.
                let loading = Task { try await loader.run() }
                for await _ in ready.stream { break }
                let (cpu, broker) = (try cpuSeconds(pid: getpid()), try brokerPid.map { try cpuSeconds(pid: $0) } ?? 0)
                let started = ContinuousClock.now
                guard await loader.restore(Set(0..<Int32(partitions))) != nil else { throw ValidationError("\(way): the restore stopped") }
                let seconds = (ContinuousClock.now - started) / .seconds(1)
                let used = (try cpuSeconds(pid: getpid()) - cpu, try brokerPid.map { try cpuSeconds(pid: $0) - broker } ?? 0)
                loading.cancel()
                _ = try? await loading.value
                guard engine.activityCount == activities, engine.memory(of: "com.example.food/order-0")?.lastSequence == Int64(history) else {
                    throw ValidationError("\(way): \(engine.activityCount) activities restored, order-0 at \(String(describing: engine.memory(of: "com.example.food/order-0")?.lastSequence))")
                }
                figures[way, default: []].append((seconds, used.0, used.1))
                print(String(format: "round %d %@: %.2f s, %.2f CPU s (%.1f µs per activity), broker %.2f CPU s", round, way, seconds, used.0,
                    used.0 / Double(activities) * 1e6, used.1))
            }
        }
        func median(_ way: String, _ value: ((seconds: Double, cpu: Double, broker: Double)) -> Double) -> Double {
            let values = (figures[way] ?? []).map(value).sorted()
            return values[values.count / 2]
        }
        let (changelog, replay) = (median("changelog", \.seconds), median("replay", \.seconds))
        print(String(
            format: "RESULT content-restore activities=%d history=%d changelog_s=%.2f changelog_cpu_s=%.2f changelog_broker_cpu_s=%.2f replay_s=%.2f replay_cpu_s=%.2f replay_broker_cpu_s=%.2f changelog_s_per_100k=%.2f speedup=%.2f",
            activities, history, changelog, median("changelog", \.cpu), median("changelog", \.broker), replay, median("replay", \.cpu),
            median("replay", \.broker), changelog / Double(activities) * 100_000, replay / changelog))
        producer.shutdown()
        try await producing.value
    }
}

/// Resident memory per live activity, in process and without a broker: `activities` update tokens
/// applied to the token table as the token replica applies them (80-byte tokens, three apps), then
/// for each activity an event made into a push request and committed, its request stored on Kafka
/// (the payload dropped, a position kept) and its outcome, delivered, recorded — what a live
/// activity leaves in content-service's state. VmRSS is read before, after the tokens and after
/// the memories (`MALLOC_ARENA_MAX` as the caller sets it).
struct Memory: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Resident memory per live activity (tokens, then activity memories).")

    @Option var templates = "Services/ContentService/Templates"
    @Option var activities = 1_000_000
    @Option var partitions: Int32 = 12

    func run() throws {
        let tokens = PartitionTokens.whole(fingerprintsOnly: true)
        let engine = try makeEngine(templates: templates, tokens: tokens)
        let apps = ["com.example.fooddelivery", "com.example.rides", "com.example.sports"]
        let started = Date()
        let base = residentKB()
        var random = SystemRandomNumberGenerator()
        for activity in 0..<activities {
            let app = AppTarget(bundleId: apps[activity % apps.count], environment: .production)
            let digits = Array("0123456789abcdef".utf8)
            let token = String(decoding: (0..<80).flatMap { _ -> [UInt8] in
                let byte = UInt8.random(in: 0...255, using: &random)
                return [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
            }, as: UTF8.self)
            let record = TokenRecord(
                kind: .update, activityId: "order-\(activity)", userId: "user-\(activity % 50_000)", token: token, app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "2.\(activity % 4).0", state: .active,
                activityStartedAt: started, registeredAt: started, updatedAt: started)
            let key = MessageKey.activity(bundleId: app.bundleId, activityId: "order-\(activity)")
            _ = tokens.apply(record, key: key, partition: KafkaPartitioner.partition(ofKey: key, partitions: partitions), offset: Int64(activity))
        }
        let withTokens = residentKB()
        for activity in 0..<activities {
            var event = deliveryEvent(activity: activity, sequence: 1)
            event.bundleId = apps[activity % apps.count]
            let key = MessageKey.activity(bundleId: apps[activity % apps.count], activityId: event.activityId)
            let partition = KafkaPartitioner.partition(ofKey: key, partitions: partitions)
            guard case .send(let prepared) = try engine.prepare(event, partition: partition) else { fatalError("not sent") }
            engine.commit(prepared)
            for (index, request) in prepared.requests.enumerated() {
                engine.stored(request, at: KafkaPosition(partition: partition, offset: Int64(activity * 4 + index)))
                // Read from islet.push-outcomes.v1, as the service reads it: its position is kept.
                engine.record(
                    PushOutcome(
                        requestId: request.requestId, activityId: request.activityId ?? event.activityId, result: .delivered, attempts: 1, completedAt: Date(),
                        bundleId: request.app.bundleId),
                    at: KafkaPosition(partition: partition, offset: Int64(activity * 4 + index)))
            }
        }
        // What a changelog round takes (content-service writes the changes every few seconds).
        for partition in 0..<partitions { _ = engine.takeUnwritten(partitions: [partition]) }
        let withMemories = residentKB()
        // What of it is pages malloc holds free (freed arrays and strings it keeps for reuse): the
        // service gives them back every 30 s (FreeMemory).
        FreeMemory.release()
        let trimmed = residentKB()
        guard engine.activityCount == activities, tokens.count == activities else {
            throw ValidationError("\(engine.activityCount) memories and \(tokens.count) tokens held, not \(activities)")
        }
        let (tokenBytes, memoryBytes) = (Double(withTokens - base) * 1024 / Double(activities), Double(withMemories - withTokens) * 1024 / Double(activities))
        print(String(format: "VmRSS: %.1f MB before, %.1f MB with %d tokens, %.1f MB with their activities' memories",
            Double(base) / 1024, Double(withTokens) / 1024, activities, Double(withMemories) / 1024))
        let trimmedBytes = Double(trimmed - base) * 1024 / Double(activities)
        print(String(format: "after malloc_trim(0): %.1f MB (%.0f bytes per activity)", Double(trimmed) / 1024, trimmedBytes))
        print(String(format: "RESULT content-memory activities=%d token_bytes_per_activity=%.0f memory_bytes_per_activity=%.0f bytes_per_activity=%.0f trimmed_bytes_per_activity=%.0f",
            activities, tokenBytes, memoryBytes, tokenBytes + memoryBytes, trimmedBytes))
    }
}

/// Scheduled steps held by one instance: what a million cost (issue 60: one ordered queue, not a timer each).
struct Steps: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Scheduled steps: CPU and memory to keep them, the idle look, sending one at its time.")

    @Option var templates = "Services/ContentService/Templates"
    @Option(help: "Activities, each with --per-activity steps (default 125,000 × 8 = 1,000,000 steps).") var activities = 125_000
    @Option var perActivity = 8
    @Option(help: "Steps made due and sent in the last part.") var fired = 10_000

    func run() throws {
        let engine = try makeEngine(templates: templates)
        let app = "com.example.food"
        func event(_ activity: Int, sequence: Int64, at: Date?) -> ActivityEvent {
            var event = deliveryEvent(activity: activity, sequence: sequence)
            event.bundleId = app
            event.at = at
            return event
        }
        for activity in 0..<activities {
            guard case .send(let prepared) = try engine.prepare(event(activity, sequence: 1, at: nil), partition: 0) else { fatalError("not sent") }
            engine.commit(prepared)
        }
        FreeMemory.release()
        let before = residentKB()
        let later = Date().addingTimeInterval(3_600)
        let cpu = try cpuSeconds(pid: getpid())
        let started = ContinuousClock.now
        for step in 0..<perActivity {
            for activity in 0..<activities {
                let at = later.addingTimeInterval(Double(step * activities + activity) / 1_000)
                guard case .schedule(let scheduled) = try engine.prepare(event(activity, sequence: Int64(10 + step), at: at), partition: 0) else {
                    fatalError("not scheduled")
                }
                engine.commit(scheduled)
            }
        }
        let steps = activities * perActivity
        let scheduleSeconds = (ContinuousClock.now - started) / .seconds(1)
        let scheduleCPU = try cpuSeconds(pid: getpid()) - cpu
        _ = engine.takeUnwritten(partitions: [0])
        FreeMemory.release()
        let after = residentKB()
        // The sender's look every 200 ms when nothing is due: a peek at the earliest step.
        let looks = 100_000
        let lookStarted = ContinuousClock.now
        var due = 0
        for _ in 0..<looks where engine.nextStepDue.map({ $0 <= Date() }) == true { due += 1 }
        let lookSeconds = (ContinuousClock.now - lookStarted) / .seconds(1)
        precondition(due == 0)
        // Steps due: `fired` activities have one moved to 5 s from now; then passes send them.
        let soon = Date().addingTimeInterval(5)
        for activity in 0..<min(fired, activities) {
            // Replaces the step of sequence 10 (moved earlier).
            guard case .schedule(let scheduled) = try engine.prepare(event(activity, sequence: 10, at: soon), partition: 0) else { fatalError("not scheduled") }
            engine.commit(scheduled)
        }
        Thread.sleep(until: soon.addingTimeInterval(0.01))
        let fireCPU = try cpuSeconds(pid: getpid())
        let fireStarted = ContinuousClock.now
        var sent = 0
        while case let due = engine.dueSteps(owned: nil), !due.isEmpty {
            for step in due {
                guard case .send(let prepared) = try engine.prepare(step.event, partition: step.partition, firing: true) else { continue }
                engine.commit(prepared)
                sent += prepared.requests.count
            }
        }
        let fireSeconds = (ContinuousClock.now - fireStarted) / .seconds(1)
        let fireCPUSeconds = try cpuSeconds(pid: getpid()) - fireCPU
        guard sent == min(fired, activities) else { throw ValidationError("\(sent) steps sent, not \(min(fired, activities))") }
        print(String(format: "%d steps kept for %d activities: %.1f µs (%.1f µs CPU) to schedule one, %.0f bytes resident each (VmRSS %.1f → %.1f MB)",
            steps, activities, scheduleSeconds / Double(steps) * 1e6, scheduleCPU / Double(steps) * 1e6, Double(after - before) * 1_024 / Double(steps),
            Double(before) / 1_024, Double(after) / 1_024))
        print(String(format: "the sender's look with none due: %.3f µs; %d steps sent at their time (passes of at most 1,000): %.1f µs (%.1f µs CPU) each",
            lookSeconds / Double(looks) * 1e6, sent, fireSeconds / Double(sent) * 1e6, fireCPUSeconds / Double(sent) * 1e6))
        print(String(format: "RESULT content-steps steps=%d schedule_us=%.1f schedule_cpu_us=%.1f bytes_per_step=%.0f look_us=%.3f fire_us=%.1f fire_cpu_us=%.1f",
            steps, scheduleSeconds / Double(steps) * 1e6, scheduleCPU / Double(steps) * 1e6, Double(after - before) * 1_024 / Double(steps),
            lookSeconds / Double(looks) * 1e6, fireSeconds / Double(sent) * 1e6, fireCPUSeconds / Double(sent) * 1e6))
    }
}

/// The process's resident memory (VmRSS), in KB.
func residentKB() -> Int { FreeMemory.resident / 1_024 }

/// User and system CPU time of a process so far, in seconds (/proc/<pid>/stat, fields 14 and 15).
func cpuSeconds(pid: Int32) throws -> Double {
    let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    guard let close = stat.lastIndex(of: ")") else { throw ValidationError("unreadable /proc/\(pid)/stat") }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { throw ValidationError("unreadable /proc/\(pid)/stat") }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
