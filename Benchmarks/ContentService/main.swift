// islet-content-bench: content-service's figures for docs/PERFORMANCE.md (scripts/bench-content.sh).
//   assembly  — payload assembly per event in process, without and with an inline thumbnail, and
//               the thumbnail itself (libgd: decode 640×480 JPEG, crop, scale, encode);
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
        commandName: "islet-content-bench", abstract: "Measure content-service.", subcommands: [Assembly.self, Pipeline.self])
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

func makeEngine(templates: String) throws -> ContentEngine {
    let key = try LinkKey(id: "bench", secret: Array("a-benchmark-link-key-of-32-bytes!".utf8))
    return ContentEngine(
        assembler: PayloadAssembler(templates: try TemplateLoader.load(directory: templates), keyring: LinkKeyring(signing: key)), tokens: PartitionTokens.whole())
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
        print(String(format: "assembly_with_thumbnail_us_per_event=%.1f payload_bytes=%d", median(withImage), bytes.1))
        print(String(format: "thumbnail_us_per_image=%.1f source_bytes=%d ladder=%d", median(thumbnail), photo.count, Thumbnailer.ladder.count))
    }
}

struct Pipeline: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var templates = "Services/ContentService/Templates"
    @Option var events = 20_000
    @Option var partitions = 4

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

        // Reference: read the events and write them back, marking in order once acknowledged.
        let reference = try await measure(topic: passThrough) {
            let consumer = try KafkaConsumer(
                configuration: .init(bootstrapServers: bootstrap, groupID: "bench-pass-\(suffix)", topics: [topics.activityEvents]), logger: benchLogger)
            let tracker = OffsetTracker()
            return Task {
                try await withThrowingDiscardingTaskGroup { group in
                    group.addTask { try await consumer.run() }
                    for await message in consumer.messages {
                        tracker.begin(message)
                        while true {
                            do {
                                try producer.produce(topic: passThrough, key: message.key, value: message.value) { result in
                                    if case .success = result, let release = tracker.complete(message) { consumer.markProcessed(release) }
                                }
                                break
                            } catch let error as KafkaError where error.isQueueFull {
                                await producer.waitForCapacity()
                            }
                        }
                    }
                }
            } as Task<Void, any Error>
        } stop: { (task: Task<Void, any Error>) in task.cancel() }

        // content-service, in process.
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": bootstrap, "ISLET_HTTP_PORT": "0", "ISLET_HTTP_HOST": "127.0.0.1"]),
            serviceName: "bench-content-\(suffix)", defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: benchLogger)
        let key = try LinkKey(id: "bench", secret: Array("a-benchmark-link-key-of-32-bytes!".utf8))
        let contentSettings = ContentSettings(templatesDirectory: templates, keyring: LinkKeyring(signing: key), grpcHost: "127.0.0.1", grpcPort: 0)
        let content = try await measure(topic: topics.pushRequests) {
            let app = try ContentServiceApp(runtime: runtime, settings: contentSettings, topics: topics)
            let group = runtime.makeServiceGroup(app.services)
            return (group, Task { try await group.run() })
        } stop: { running in
            await running.0.triggerGracefulShutdown()
            _ = try? await running.1.value
        }
        producer.shutdown()
        _ = try? await producing.value
        print(String(format: "passthrough_events_per_s=%.0f", reference))
        print(String(format: "content_events_per_s=%.0f ratio=%.2f", content, content / reference))
    }

    /// Starts a reader of `topic`, then the system under test; the rate is the records of `topic`
    /// between the first and the `events`-th read, per second (a group's join time is not counted).
    func measure<Running>(
        topic: String, start: () async throws -> Running, stop: (Running) async throws -> Void
    ) async throws -> Double {
        let reader = try KafkaConsumer(configuration: .replica(bootstrapServers: bootstrap, topics: [topic]), logger: benchLogger)
        let reading = Task { try await reader.run() }
        let running = try await start()
        var first: ContinuousClock.Instant?
        var count = 0
        var last = ContinuousClock.now
        for await _ in reader.messages {
            last = ContinuousClock.now
            if first == nil { first = last }
            count += 1
            if count >= events { break }
        }
        reader.shutdown()
        _ = try? await reading.value
        try await stop(running)
        guard let first, count > 1 else { return 0 }
        return Double(count - 1) / ((last - first) / .seconds(1))
    }
}
