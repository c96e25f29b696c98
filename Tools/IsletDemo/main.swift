// islet-demo: plays the README's two scenarios against the running services, the way an iOS app and
// a backend would — the app registers tokens with token-registry and forwards a tap to
// analytics-ingest, the backend publishes domain events on Kafka — and prints what the services
// answer: the pushes as the APNs simulator received them (what the phone would show), the click
// event from the clicks topic, the registry's state after APNs said the token is dead.
// scripts/demo.sh starts everything and runs it.
import APNsSimulator
import ArgumentParser
import AsyncHTTPClient
import ContentService
import Foundation
import Hummingbird
import IsletKafka
import IsletMessages
import JWTKit
import Logging
import NIOCore
import NIOHTTP1
import TokenRegistry
import UnixSignals

let quiet: Logger = {
    var logger = Logger(label: "islet.demo")
    logger.logLevel = .error
    return logger
}()

@main
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-demo", abstract: "The local demo's app and backend.", subcommands: [Setup.self, MockBroker.self, ServeImages.self, Play.self, Latency.self, Memory.self])
}

/// Creates every Islet topic (4 partitions; compaction and retention as in docs/topics.md).
struct Setup: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var partitions = 4

    func run() async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        _ = try await admin.createTopics(IsletTopics.all.map { .init(name: $0.name, partitions: partitions, configs: $0.configs) })
        print("topics: \(IsletTopics.all.map(\.name).joined(separator: ", "))")
    }
}

/// A broker for benchmarks whose reads do not get slower as it fills: librdkafka's mock cluster (one
/// broker, in memory, in this process; real Kafka protocol over TCP) with every Islet topic and the
/// extra topics named by `--topic NAME:PARTITIONS`. It keeps about the last 5 MB of each partition.
/// Prints `ISLET_KAFKA_BOOTSTRAP=host:port` and runs until SIGTERM or SIGINT (scripts/broker.sh
/// starts it with `ISLET_BROKER=mock`). It creates no topic on request: the mock cluster has no
/// CreateTopics.
struct MockBroker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mock-broker")
    @Option var partitions = 4
    @Option(name: .customLong("topic"), help: "NAME:PARTITIONS, another topic to create (repeatable)") var topics: [String] = []

    func run() async throws {
        var wanted = IsletTopics.all.map { ($0.name, partitions) }
        for spec in topics {
            let parts = spec.split(separator: ":")
            guard parts.count == 2, let count = Int(parts[1]), count > 0 else {
                throw ValidationError("--topic takes NAME:PARTITIONS, got \(spec)")
            }
            wanted.append((String(parts[0]), count))
        }
        let cluster = try KafkaMockCluster(brokers: 1)
        for (name, count) in wanted { try cluster.createTopic(name, partitions: count) }
        // Unbuffered: the script reads it while this process keeps running.
        FileHandle.standardOutput.write(Data("ISLET_KAFKA_BOOTSTRAP=\(cluster.bootstrapServers)\n".utf8))
        for await _ in await UnixSignalsSequence(trapping: .sigterm, .sigint) { break }
        withExtendedLifetime(cluster) {}
    }
}

/// Serves the photos the events point at (a courier's and a driver's), as a CDN would.
struct ServeImages: AsyncParsableCommand {
    @Option var port = 8099

    func run() async throws {
        let router = Router()
        for (name, colours) in [("courier.jpg", (0xE8_6A_1F, 0x2B_3A_67)), ("driver.jpg", (0x1F_8A_70, 0xF2_E8_CF))] {
            let jpeg = Self.portrait(colours.0, colours.1)
            router.get(RouterPath(name)) { _, _ in
                Response(status: .ok, headers: [.contentType: "image/jpeg"], body: .init(byteBuffer: ByteBuffer(bytes: jpeg)))
            }
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: quiet)
        try await app.runService()
    }

    /// A 400×300 picture (a head and shoulders on a background), JPEG, made with libgd.
    static func portrait(_ background: Int, _ figure: Int) -> [UInt8] {
        let image = RasterImage(width: 400, height: 300)!
        image.fillRectangle(x1: 0, y1: 0, x2: 399, y2: 299, colour: background)
        image.fillEllipse(centreX: 200, centreY: 120, width: 110, height: 130, colour: figure)
        image.fillEllipse(centreX: 200, centreY: 300, width: 260, height: 180, colour: figure)
        return image.jpeg(quality: 85)!
    }
}

struct Play: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var registry = "http://127.0.0.1:8081"
    @Option var simulator = "http://127.0.0.1:8090"
    @Option var ingest = "http://127.0.0.1:8084"
    @Option var images = "http://127.0.0.1:8099"
    @Option(help: "The registry's HS256 key, kid=secret.") var jwtKey: String
    @Option(help: "food, ride or both.") var scenario = "both"

    func run() async throws {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        let producing = Task { try await producer.run() }
        let world = try await World(play: self, producer: producer)
        if scenario == "food" || scenario == "both" { try await world.food() }
        if scenario == "ride" || scenario == "both" { try await world.ride() }
        producer.shutdown()
        try await producing.value
    }
}

struct DemoFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

struct Claims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The app, the backend, and a view of what the phone received.
struct World {
    let play: Play
    let producer: KafkaProducer
    let jwt: String
    let http = World.client
    let started = Date()

    /// Up to 256 connections to a host: registrations in flight at once (`memory --lanes`) are
    /// not queued behind AsyncHTTPClient's default of 8 connections.
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 256
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()
    let run = String(UUID().uuidString.prefix(6).lowercased())

    init(play: Play, producer: KafkaProducer) async throws {
        self.play = play
        self.producer = producer
        let parts = play.jwtKey.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw DemoFailure("--jwt-key must be kid=secret") }
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: parts[1]), digestAlgorithm: .sha256, kid: JWKIdentifier(string: parts[0]))
        jwt = try await keys.sign(Claims(sub: "demo-user", exp: .init(value: Date().addingTimeInterval(3_600))), kid: JWKIdentifier(string: parts[0]))
    }

    // MARK: The food order

    func food() async throws {
        let order = "order-\(run)"
        let token = Self.token("f00d" + run)
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        heading("A food order (\(order)): from the kitchen to the door")
        step("app", "the user orders; the app starts the Live Activity and registers its push token")
        let answer = try await put(
            "/v1/activities/\(order)/token",
            RegisterActivityTokenRequest(
                token: token, attributesType: "DeliveryAttributes", app: app, frequentUpdatesEnabled: false, appVersion: "2.1",
                activityStartedAt: Date()))
        service("token-registry", answer)

        var fields: [String: JSONValue] = ["orderId": .string(run), "storeName": .string("Casa Lola")]
        let courier: JSONValue = .object(["name": .string("Ana"), "photoUrl": .string("\(play.images)/courier.jpg")])
        let steps: [(ActivityEventKind, Urgency, String, [String: JSONValue], String)] = [
            (.start, .routine, "placed", [:], "order placed"),
            (.update, .routine, "preparing", ["etaAt": .string(IsletDate.format(Date().addingTimeInterval(1_800)))], "the kitchen starts"),
            (.update, .important, "courier_assigned", ["courier": courier], "a courier is assigned (with a photo)"),
            (.update, .important, "out_for_delivery", ["progress": .integer(30)], "the courier picks it up"),
            (.update, .routine, "out_for_delivery", ["progress": .integer(60)], "the courier moves"),
            (.update, .routine, "out_for_delivery", ["progress": .integer(85)], "the courier moves"),
            (.update, .important, "arriving", ["progress": .integer(100)], "the courier is at the door"),
            (.end, .important, "delivered", [:], "delivered"),
        ]
        var last: [AcceptedNotification] = []
        for (index, (kind, urgency, status, extra, what)) in steps.enumerated() {
            fields["status"] = .string(status)
            fields.merge(extra) { $1 }
            let event = ActivityEvent(
                eventId: "food-\(run)-\(index)", activityId: order, kind: kind, attributesType: "DeliveryAttributes", fields: fields,
                urgency: urgency, occurredAt: Date(), sequence: Int64(index + 1), source: "orders-backend", bundleId: app.bundleId)
            step("backend", "\(what): \(kind.rawValue) \(status) (\(urgency.rawValue)) on islet.activity-events.v1")
            try await producer.send(event, to: IsletTopics.activityEvents.name)
            last = try await received(token: token, through: RequestIds.content(bundleId: app.bundleId, activityId: order, eventId: event.eventId))
        }

        // A tap on the Lock Screen widget, forwarded by the app.
        guard let widget = last.last(where: { $0.event == "update" }) ?? last.last,
            let link = Self.payload(widget)?["aps"]?["content-state"]?["links"]?["lockScreen"]?.stringValue
        else { throw DemoFailure("the last payload has no Lock Screen link") }
        step("app", "the user taps the widget; iOS opens \(link.prefix(60))…; the app forwards the URL")
        let tapAnswer = try await post("\(play.ingest)/v1/taps", ["url": .string(link), "tappedAt": .string(IsletDate.format(Date())),
            "appVersion": .string("2.1"), "osVersion": .string("18.1")])
        service("analytics-ingest", tapAnswer)
        let click = try await firstRecord(on: IsletTopics.clicks.name, as: ClickEvent.self) { $0.activityId == order }
        service("islet.clicks.v1", "click \(click.clickId.prefix(8))…: \(click.attributesType) · surface \(click.surface.rawValue) · element \(click.element) · content #\(click.contentSequence) · tapped \(IsletDate.format(click.tappedAt))")
    }

    // MARK: The ride

    func ride() async throws {
        let ride = "ride-\(run)"
        let device = "device-\(run)"
        let startToken = Self.token("5ea7" + run)
        let token = Self.token("0ddba11" + run)
        let app = AppTarget(bundleId: "com.example.ride", environment: .production)
        heading("A ride (\(ride)): started remotely, budget spent, the app deleted")
        step("app", "at launch the app registers its push-to-start token for RideAttributes")
        service("token-registry", try await put(
            "/v1/apps/\(app.bundleId)/devices/\(device)/push-to-start/RideAttributes",
            RegisterPushToStartTokenRequest(token: startToken, environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0")))

        var fields: [String: JSONValue] = ["rideId": .string(run), "phase": .string("matching")]
        step("backend", "the rider books: start with push-to-start on islet.activity-events.v1")
        let start = ActivityEvent(
            eventId: "ride-\(run)-0", activityId: ride, kind: .start, attributesType: "RideAttributes", fields: fields, urgency: .important,
            occurredAt: Date(), sequence: 1, startTarget: .init(app: app, deviceId: device), attributes: ["rideId": .string(run)], source: "rides-backend",
            bundleId: app.bundleId)
        try await producer.send(start, to: IsletTopics.activityEvents.name)
        _ = try await received(token: startToken, through: RequestIds.content(bundleId: app.bundleId, activityId: ride, eventId: start.eventId))

        step("app", "iOS started the activity; the app registers the activity's own push token")
        service("token-registry", try await put(
            "/v1/activities/\(ride)/token",
            RegisterActivityTokenRequest(
                token: token, attributesType: "RideAttributes", app: app, frequentUpdatesEnabled: false, appVersion: "3.0",
                activityStartedAt: Date(), deviceId: device)))

        fields["driver"] = .object([
            "name": .string("Sam"), "vehicle": .string("Blue Prius"), "plate": .string("KX 42 LT"), "photoUrl": .string("\(play.images)/driver.jpg"),
        ])
        fields["phase"] = .string("en_route")
        step("backend", "the driver approaches: an important update every moment (priority 10 while the activity's budget lasts)")
        for progress in stride(from: 10, through: 70, by: 10) {
            fields["progress"] = .integer(Int64(progress))
            let sequence = Int64(progress / 10 + 1)
            let event = ActivityEvent(
                eventId: "ride-\(run)-\(sequence)", activityId: ride, kind: .update, attributesType: "RideAttributes", fields: fields,
                urgency: .important, occurredAt: Date(), sequence: sequence, source: "rides-backend", bundleId: app.bundleId)
            try await producer.send(event, to: IsletTopics.activityEvents.name)
            _ = try await received(token: token, through: RequestIds.content(bundleId: app.bundleId, activityId: ride, eventId: event.eventId))
        }

        step("app", "the user deletes the app: APNs answers 410 Unregistered for its token from now on")
        var fault = Fault(kind: .reject)
        fault.token = token
        fault.status = 410
        fault.reason = "Unregistered"
        fault.timestampMilliseconds = Int64(Date().timeIntervalSince1970 * 1_000)
        fault.count = nil
        _ = try await postRaw("\(play.simulator)/admin/faults", try IsletJSON.encode(fault))
        fields["phase"] = .string("arriving")
        fields["progress"] = .integer(90)
        let arriving = ActivityEvent(
            eventId: "ride-\(run)-9", activityId: ride, kind: .update, attributesType: "RideAttributes", fields: fields, urgency: .important,
            occurredAt: Date(), sequence: 9, source: "rides-backend", bundleId: app.bundleId)
        step("backend", "the driver arrives: update on islet.activity-events.v1")
        try await producer.send(arriving, to: IsletTopics.activityEvents.name)
        let requestId = RequestIds.content(bundleId: app.bundleId, activityId: ride, eventId: arriving.eventId)
        let outcome = try await firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) { $0.requestId == requestId }
        service("islet.push-outcomes.v1", "\(outcome.result.rawValue): APNs \(outcome.apns.map { "\($0.status) \($0.reason ?? "")" } ?? "-") after \(outcome.attempts) attempt(s)")
        let state = try await waitForRegistry("/v1/activities/\(ride)?bundleId=\(app.bundleId)") { $0.contains("\"invalidated\"") }
        service("token-registry", state)
    }

    // MARK: Pieces

    static func token(_ seed: String) -> String {
        let hex = seed.unicodeScalars.map { String(format: "%02x", $0.value & 0xFF) }.joined()
        return String((hex + String(repeating: "c0ffee", count: 20)).prefix(64))
    }

    static func payload(_ notification: AcceptedNotification) -> JSONValue? {
        try? IsletJSON.decodeValue(JSONValue.self, from: Array(notification.payload.utf8))
    }

    func heading(_ text: String) {
        print("\n== \(text)")
    }

    func step(_ actor: String, _ text: String) {
        print(String(format: "%7.1fs  %@  %@", Date().timeIntervalSince(started), actor.padding(toLength: 8, withPad: " ", startingAt: 0), text))
    }

    func service(_ name: String, _ text: String) {
        print("          ↳ \(name): \(Self.summary(text))")
    }

    /// The gist of a service's JSON answer (`201 {…}`): what changed and the state, not every field.
    static func summary(_ answer: String) -> String {
        guard let brace = answer.firstIndex(of: "{"), case .object(let body)? = try? IsletJSON.decodeValue(JSONValue.self, from: Array(answer[brace...].utf8))
        else { return answer }
        let status = answer[..<brace].trimmingCharacters(in: .whitespaces)
        let record = body["token"]?.objectValue ?? body
        var parts: [String] = []
        if let change = body["change"]?.stringValue { parts.append(change) }
        for key in ["kind", "activityId", "state"] { if let value = record[key]?.stringValue { parts.append("\(key) \(value)") } }
        if let fingerprint = record["tokenFingerprint"]?.stringValue { parts.append("token \(fingerprint)… (fingerprint)") }
        if let reason = record["invalidation"]?["reason"]?.stringValue { parts.append("reason \(reason)") }
        if parts.isEmpty {
            for key in body.keys.sorted() { parts.append("\(key) \(body[key]!.stringValue ?? String(decoding: body[key]!.jsonBytes, as: UTF8.self))") }
        }
        return "\(status) " + (parts.isEmpty ? String(answer[brace...].prefix(200)) : parts.joined(separator: " · "))
    }

    /// Waits until the simulator received the push `apnsId` for `token`; prints every push to the
    /// token it has not printed yet, as the phone would show it.
    func received(token: String, through apnsId: String) async throws -> [AcceptedNotification] {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let all = try await notifications(token: token)
            if let index = all.lastIndex(where: { $0.apnsID.lowercased() == apnsId.lowercased() }) {
                let new = all.filter { !Printed.shared.contains($0.apnsID + $0.token) }
                for notification in new {
                    Printed.shared.insert(notification.apnsID + notification.token)
                    print("          ↳ phone: \(Self.describe(notification))")
                }
                return Array(all[...index])
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DemoFailure("the simulator did not receive push \(apnsId) within 30 s: see the services' logs in .islet-run/demo/")
    }

    /// One push as the phone would show it: event, priority, size, the content's main fields.
    static func describe(_ notification: AcceptedNotification) -> String {
        var parts = ["\(notification.event) p\(notification.priority) \(notification.payloadBytes) B"]
        let aps = payload(notification)?["aps"]
        if let state = aps?["content-state"]?.objectValue {
            for key in ["status", "phase"] { if let value = state[key]?.stringValue { parts.append(value) } }
            if let headline = state["headline"]?.stringValue { parts.append("\"\(headline)\"") }
            if case .number(let progress)? = state["progress"], progress > 0 { parts.append("progress \(Int(progress))%") }
            if case .integer(let progress)? = state["progress"], progress > 0 { parts.append("progress \(progress)%") }
            if case .object(let layout)? = state["layout"] {
                let images = layout.values.compactMap { surface -> JSONValue? in
                    guard case .array(let components) = surface else { return nil }
                    return components.compactMap { $0["remoteImage"] }.first
                }
                if let image = images.first { parts.append(image["data"] != nil ? "photo inline (\(image["data"]!.stringValue!.count) B base64)" : "photo by URL") }
            }
        }
        if let alert = aps?["alert"]?["title"]?.stringValue { parts.append("alert \"\(alert)\"") }
        if aps?["dismissal-date"] != nil { parts.append("dismissal-date set") }
        if aps?["input-push-token"] != nil { parts.append("push-to-start, asks for the activity's token") }
        return parts.joined(separator: " · ")
    }

    func notifications(token: String) async throws -> [AcceptedNotification] {
        let response = try await http.execute(HTTPClientRequest(url: "\(play.simulator)/admin/notifications?token=\(token)"), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 64 << 20)
        return try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: body))
    }

    func put<Body: Encodable>(_ path: String, _ body: Body) async throws -> String {
        var request = HTTPClientRequest(url: play.registry + path)
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(jwt)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(try IsletJSON.encode(body))
        return try await answer(request)
    }

    func post(_ url: String, _ body: [String: JSONValue]) async throws -> String {
        try await postRaw(url, JSONValue.object(body).jsonBytes)
    }

    func postRaw(_ url: String, _ body: [UInt8]) async throws -> String {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(jwt)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(body)
        return try await answer(request)
    }

    func answer(_ request: HTTPClientRequest) async throws -> String {
        let response = try await http.execute(request, timeout: .seconds(15))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        guard (200..<300).contains(response.status.code) else { throw DemoFailure("\(request.url) answered \(response.status.code): \(text)") }
        return "\(response.status.code) \(text)"
    }

    func waitForRegistry(_ path: String, until done: (String) -> Bool) async throws -> String {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            var request = HTTPClientRequest(url: play.registry + path)
            request.headers.add(name: "Authorization", value: "Bearer \(jwt)")
            let text = try await answer(request)
            if done(text) { return text }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw DemoFailure("token-registry did not show the change within 30 s")
    }

    /// The first record of `topic` (read from its start) that decodes as `Message` and matches.
    func firstRecord<Message: IsletMessage>(on topic: String, as type: Message.Type, where matches: @escaping @Sendable (Message) -> Bool) async throws -> Message {
        let reader = try KafkaConsumer(configuration: .replica(bootstrapServers: play.bootstrap, topics: [topic]), logger: quiet)
        return try await withThrowingTaskGroup(of: Message?.self) { group in
            group.addTask {
                try await reader.run()
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                reader.shutdown()
                return nil
            }
            group.addTask {
                for await message in reader.messages {
                    if let decoded = try? IsletJSON.decode(Message.self, from: message.value ?? []), matches(decoded) { return decoded }
                }
                return nil
            }
            while let next = try await group.next() {
                if let next {
                    reader.shutdown()
                    group.cancelAll()
                    return next
                }
            }
            throw DemoFailure("no matching record on \(topic) within 30 s")
        }
    }
}

/// Pushes already printed (the demo prints each once).
final class Printed: @unchecked Sendable {
    static let shared = Printed()
    private var seen: Set<String> = []
    private let lock = NSLock()
    func contains(_ key: String) -> Bool { lock.withLock { seen.contains(key) } }
    func insert(_ key: String) { lock.withLock { _ = seen.insert(key) } }
}

/// Where the running product is, for the benchmarks that drive it (`latency`, `memory`).
struct StackOptions: ParsableArguments {
    @Option var bootstrap: String
    @Option var registry = "http://127.0.0.1:8081"
    @Option var simulator = "http://127.0.0.1:8090"
    @Option(help: "The registry's HS256 key, kid=secret.") var jwtKey: String

    /// A running producer and the demo's world (its registry client and JWT) on top of it.
    func connect() async throws -> (KafkaProducer, Task<Void, any Error>, World) {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        let producing = Task { try await producer.run() }
        let play = try Play.parse(["--bootstrap", bootstrap, "--registry", registry, "--simulator", simulator, "--jwt-key", jwtKey])
        return (producer, producing, try await World(play: play, producer: producer))
    }
}

/// End-to-end latency: domain events produced at a steady rate to many activities (each gets one
/// every `activities / rate` seconds, so nothing waits for an activity's previous push and nothing is
/// coalesced; routine updates go at priority 5, so no budget holds them back) → the time each push
/// reached the simulator. scripts/bench-e2e.sh runs it against the whole product.
struct Latency: AsyncParsableCommand {
    @OptionGroup var stack: StackOptions
    @Option var rate = 1_000
    @Option var seconds = 30
    @Option var activities = 2_000
    @Option(help: "A process whose CPU time is reported per event, name=pid (repeatable).") var process: [String] = []

    func run() async throws {
        let processes = try ProcessStats.parse(process)
        let (producer, producing, world) = try await stack.connect()
        let run = world.run
        let names = (0..<activities).map { "lat-\(run)-\($0)" }
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        print("registering \(activities) activities")
        try await world.register(names, app: app)
        @Sendable func event(_ index: Int) -> ActivityEvent {
            let name = names[index % names.count]
            let round = index / names.count
            return ActivityEvent(
                eventId: "\(name)-\(round)", activityId: name, kind: round == 0 ? .start : .update, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(name), "storeName": .string("Casa Lola"), "status": .string("out_for_delivery"), "progress": .integer(Int64(round % 100))],
                urgency: .routine, occurredAt: Date(), sequence: Int64(round + 1), source: "latency-bench", bundleId: app.bundleId)
        }
        // Warm-up: every activity's first event (its first content), not measured.
        print("warm-up: \(activities) first events")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil, event: event)
        try await Task.sleep(for: .seconds(5))

        let total = rate * seconds
        print("measuring: \(total) events at \(rate)/s over \(activities) activities")
        let produced = ProducedAt()
        let cpuBefore = try processes.map { try ProcessStats.cpuSeconds(pid: $0.1) }
        try await pace(activities..<(activities + total), rate: rate, producer: producer, produced: produced, event: event)
        try await Task.sleep(for: .seconds(5))
        let cpuAfter = try processes.map { try ProcessStats.cpuSeconds(pid: $0.1) }
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(stack.simulator)/admin/notifications?payload=false"), timeout: .seconds(60))
        let received = try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: try await response.body.collect(upTo: 1 << 30)))
        let arrival = Dictionary(received.map { ($0.apnsID.lowercased(), $0.receivedAt) }) { first, _ in first }
        var latencies: [Double] = []
        var missing = 0
        for (id, at) in produced.all {
            if let receivedAt = arrival[id] { latencies.append(receivedAt.timeIntervalSince(at) * 1_000) } else { missing += 1 }
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double { latencies.isEmpty ? .nan : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        print(String(format: "end-to-end latency (event produced → simulator received), %d events at %d/s: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; %d not received",
            latencies.count, rate, percentile(0.5), percentile(0.9), percentile(0.99), latencies.last ?? .nan, missing))

        // Over the run: a stack that keeps up has the same latency in every window; one whose
        // broker slows as its topics grow (docs/operations.md) gets slower window by window.
        if let start = produced.all.values.min() {
            var windows: [Int: [Double]] = [:]
            for (id, at) in produced.all {
                guard let receivedAt = arrival[id] else { continue }
                windows[Int(at.timeIntervalSince(start) / 10), default: []].append(receivedAt.timeIntervalSince(at) * 1_000)
            }
            let medians: [String] = windows.keys.sorted().map { window in
                let sorted = windows[window, default: []].sorted()
                return String(format: "%.0f", sorted[sorted.count / 2])
            }
            print("  p50 by 10 s of production (ms): \(medians.joined(separator: ", "))")
        }

        // Where the time goes: content-service stamps each request when it makes it (createdAt).
        let created = try await requestTimes(ids: Set(produced.all.keys))
        var first: [Double] = []
        var second: [Double] = []
        for (id, at) in produced.all {
            guard let createdAt = created[id] else { continue }
            first.append(createdAt.timeIntervalSince(at) * 1_000)
            if let receivedAt = arrival[id] { second.append(receivedAt.timeIntervalSince(createdAt) * 1_000) }
        }
        for (name, values) in [("event produced → request made by content-service", first), ("request made → simulator received", second)] {
            let sorted = values.sorted()
            func p(_ q: Double) -> Double { sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))] }
            print(String(format: "  %@: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (%d)", name, p(0.5), p(0.9), p(0.99), sorted.count))
        }
        // CPU time each process spent per event while the events were produced (and 5 s after).
        for (index, (name, _)) in processes.enumerated() {
            let perEvent = (cpuAfter[index] - cpuBefore[index]) / Double(total) * 1_000
            print(String(format: "  CPU %@: %.3f ms per event", name, perEvent))
            print("cpu\t\(name)\t\(String(format: "%.4f", perEvent))")
        }
        producer.shutdown()
        try await producing.value
    }

    /// When content-service made each of these requests, read from `islet.push-requests.v1` to its end.
    func requestTimes(ids: Set<String>) async throws -> [String: Date] {
        let reader = try KafkaConsumer(configuration: .replica(bootstrapServers: stack.bootstrap, topics: [IsletTopics.pushRequests.name]), logger: quiet)
        return try await withThrowingTaskGroup(of: [String: Date]?.self) { group in
            group.addTask {
                try await reader.run()
                return nil
            }
            group.addTask {
                var times: [String: Date] = [:]
                var catchUp = ReplicaCatchUp()
                for await event in reader.events {
                    if case .message(let message) = event, let request = try? IsletJSON.decode(PushRequest.self, from: message.value ?? []),
                        ids.contains(request.requestId)
                    {
                        times[request.requestId] = request.createdAt
                    }
                    if catchUp.note(event) { break }
                }
                return times
            }
            var times: [String: Date] = [:]
            while let next = try await group.next() {
                if let next {
                    times = next
                    reader.shutdown()
                }
            }
            return times
        }
    }
}

/// What /proc says about a process of the product.
enum ProcessStats {
    /// `name=pid` options.
    static func parse(_ options: [String]) throws -> [(String, Int32)] {
        try options.map { entry in
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let pid = Int32(parts[1]) else { throw ValidationError("--process takes name=pid, not \(entry)") }
            return (String(parts[0]), pid)
        }
    }

    /// VmRSS of a process, from /proc.
    static func residentBytes(pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { throw ValidationError("no VmRSS for process \(pid)") }
        return kilobytes * 1_024
    }

    /// User and system CPU time of a process so far, in seconds (/proc/<pid>/stat, fields 14 and 15).
    static func cpuSeconds(pid: Int32) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // The command name (field 2) is in parentheses and may hold spaces: count from after it.
        guard let close = stat.lastIndex(of: ")") else { throw ValidationError("unreadable /proc/\(pid)/stat") }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { throw ValidationError("unreadable /proc/\(pid)/stat") }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Produces the events of `indices` at `rate` per second (each send in its own task); records when each was handed over.
func pace(
    _ indices: Range<Int>, rate: Int, producer: KafkaProducer, produced: ProducedAt?, event: @escaping @Sendable (Int) -> ActivityEvent
) async throws {
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for index in indices {
            let due = start + .seconds(Double(index - indices.lowerBound) / Double(rate))
            if due > ContinuousClock.now { try await Task.sleep(until: due) }
            group.addTask {
                let event = event(index)
                let at = Date()
                try await producer.send(event, to: IsletTopics.activityEvents.name)
                if let bundleId = event.bundleId {
                    produced?.record(RequestIds.content(bundleId: bundleId, activityId: event.activityId, eventId: event.eventId), at)
                }
            }
        }
        try await group.waitForAll()
    }
}

extension World {
    /// Registers an update token for each activity with token-registry, `lanes` at a time, as the apps would.
    func register(_ names: [String], app: AppTarget, lanes: Int = 32) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    for (index, name) in names.enumerated() where index % lanes == lane {
                        _ = try await put(
                            "/v1/activities/\(name)/token",
                            RegisterActivityTokenRequest(
                                token: World.token("1a7" + name), attributesType: "DeliveryAttributes", app: app, frequentUpdatesEnabled: false,
                                appVersion: "2.1", activityStartedAt: Date()))
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}

/// Memory per live activity: the resident memory of apns-dispatcher and content-service (by pid)
/// before and after `activities` activities became live — registered with token-registry (both
/// services keep the token table) and sent one important event each (content-service remembers the
/// activity's content; the dispatcher its spent priority-10 budget) — and the growth per activity.
/// scripts/bench-memory.sh runs it against the whole product.
struct Memory: AsyncParsableCommand {
    @OptionGroup var stack: StackOptions
    @Option var activities = 100_000
    @Option(help: "Events per second.") var rate = 1_500
    @Option(help: "Registrations in flight at once.") var lanes = 256
    @Option(help: "A process to measure, name=pid (repeatable).") var process: [String]
    @Option(help: "apns-dispatcher's Prometheus metrics.") var dispatcherMetrics = "http://127.0.0.1:8082/metrics"
    @Option(help: "content-service's Prometheus metrics.") var contentMetrics = "http://127.0.0.1:8083/metrics"

    func run() async throws {
        let processes = try ProcessStats.parse(process)
        let (producer, producing, world) = try await stack.connect()
        let names = (0..<activities).map { "mem-\(world.run)-\($0)" }
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        let services = [("apns-dispatcher", dispatcherMetrics), ("content-service", contentMetrics)]

        let before = try processes.map { try ProcessStats.residentBytes(pid: $0.1) }
        let acceptedBefore = try await acceptedPushes()
        var metricsBefore: [PrometheusSample] = []
        for (_, url) in services { metricsBefore.append(try await PrometheusSample.scrape(url)) }
        let started = ContinuousClock.now
        print("registering \(activities) activities, \(lanes) at a time")
        try await world.register(names, app: app, lanes: lanes)
        print("registered in \(ContinuousClock.now - started)")
        // The services learn the tokens from the token topic: a push whose token has not reached the
        // dispatcher's table within its token wait ends as token-invalid. How far behind they are:
        let registered = ContinuousClock.now
        for (index, (name, url)) in services.enumerated() {
            let target = metricsBefore[index].sum("islet_tokens_table_size") + Double(activities)
            var last = (size: -1.0, at: ContinuousClock.now)
            while true {
                let size = try await PrometheusSample.scrape(url).sum("islet_tokens_table_size")
                if size >= target { break }
                if size != last.size { last = (size, ContinuousClock.now) }
                if ContinuousClock.now - last.at > .seconds(60) {
                    print("\(name)'s token table stopped at \(Int(size)) of \(Int(target)) tokens")
                    break
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            print("\(name)'s token table had every token \(ContinuousClock.now - registered) after the last registration was answered")
        }
        print("producing one important event each at \(rate)/s")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil) { index in
            let name = names[index]
            return ActivityEvent(
                eventId: "\(name)-0", activityId: name, kind: .start, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(name), "storeName": .string("Casa Lola"), "status": .string("preparing"), "progress": .integer(5)],
                urgency: .important, occurredAt: Date(), sequence: 1, source: "memory-bench", bundleId: app.bundleId)
        }
        // Every push reached the simulator (or nothing moved for a minute): the activities are live in both services.
        var accepted = 0
        var last = (count: -1, at: ContinuousClock.now)
        while accepted < activities {
            accepted = try await acceptedPushes() - acceptedBefore
            if accepted != last.count { last = (accepted, ContinuousClock.now) }
            if ContinuousClock.now - last.at > .seconds(60) { break }
            try await Task.sleep(for: .seconds(1))
        }
        try await Task.sleep(for: .seconds(3))
        let after = try processes.map { try ProcessStats.residentBytes(pid: $0.1) }
        print("\(accepted) of \(activities) pushes received by the simulator after \(ContinuousClock.now - started)")
        // Where the events went: content-service's results and the dispatcher's final outcomes.
        for (index, (name, url)) in services.enumerated() {
            let family = name == "apns-dispatcher" ? "islet_dispatcher_outcomes_total" : "islet_content_events_total"
            let counts = try await PrometheusSample.scrape(url).subtracting(metricsBefore[index]).byLabel(family, "result")
            let listed: [String] = counts.keys.sorted().map { key in "\(key) \(Int(counts[key] ?? 0))" }
            print("\(name) \(family): \(listed.joined(separator: ", "))")
        }
        for (index, (name, _)) in processes.enumerated() {
            let perActivity = Double(after[index] - before[index]) / Double(activities)
            print(String(format: "%@: %.1f MB resident before, %.1f MB with %d live activities: %.0f bytes per activity",
                name, Double(before[index]) / 1e6, Double(after[index]) / 1e6, activities, perActivity))
            print("memory\t\(name)\t\(Int(perActivity.rounded()))\t\(before[index])\t\(after[index])")
        }
        producer.shutdown()
        try await producing.value
        if accepted < activities { throw ValidationError("only \(accepted) of \(activities) pushes arrived: the figures above undercount") }
    }

    private func acceptedPushes() async throws -> Int {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(stack.simulator)/admin/stats"), timeout: .seconds(30))
        return try IsletJSON.decodeValue(SimulatorStats.self, from: Array(buffer: try await response.body.collect(upTo: 1 << 20))).accepted
    }
}

/// A service's Prometheus metrics at one moment: each sample line's name, labels and value.
struct PrometheusSample {
    struct Sample: Hashable {
        var name: String
        var labels: [String: String]
    }
    var samples: [Sample: Double] = [:]

    static func scrape(_ url: String) async throws -> PrometheusSample {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        guard response.status == .ok else { throw ValidationError("\(url) answered \(response.status)") }
        return PrometheusSample(text: String(buffer: try await response.body.collect(upTo: 1 << 24)))
    }

    /// Prometheus's text format: `name{label="value",...} number`, `#` lines are comments.
    init(text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            let series = line[..<space]
            var labels: [String: String] = [:]
            let name: Substring
            if let open = series.firstIndex(of: "{"), series.hasSuffix("}") {
                name = series[..<open]
                for pair in series[series.index(after: open)..<series.index(before: series.endIndex)].split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    if parts.count == 2 { labels[String(parts[0])] = String(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))) }
                }
            } else {
                name = series
            }
            samples[Sample(name: String(name), labels: labels), default: 0] += value
        }
    }

    private init(samples: [Sample: Double]) { self.samples = samples }

    /// The family's value summed over its label sets (0 when absent).
    func sum(_ name: String) -> Double { samples.filter { $0.key.name == name }.values.reduce(0, +) }

    /// The family's values summed by one label.
    func byLabel(_ name: String, _ label: String) -> [String: Double] {
        samples.filter { $0.key.name == name }.reduce(into: [:]) { $0[$1.key.labels[label] ?? "", default: 0] += $1.value }
    }

    /// What changed since `earlier` (counters).
    func subtracting(_ earlier: PrometheusSample) -> PrometheusSample {
        PrometheusSample(samples: samples.reduce(into: [:]) { $0[$1.key] = $1.value - (earlier.samples[$1.key] ?? 0) })
    }
}

/// When each measured event was produced, by the request id its push carries.
final class ProducedAt: @unchecked Sendable {
    private var times: [String: Date] = [:]
    private let lock = NSLock()
    func record(_ id: String, _ at: Date) { lock.withLock { times[id] = at } }
    var all: [String: Date] { lock.withLock { times } }
}
