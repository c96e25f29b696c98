import ArgumentParser
import AsyncHTTPClient
import Foundation
import IsletKafka
import IsletMessages
import Logging
import NIOCore
import NIOHTTP1

/// `islet publish-event`: an ActivityEvent from flags (or JSON) onto islet.activity-events.v1.
struct PublishEvent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "publish-event",
        abstract: "Publish an ActivityEvent to islet.activity-events.v1, keyed by its activity id (through Kafka, or content-service's HTTP API).",
        discussion: """
            Build the event from flags, or give a whole event as JSON with --json (a file, or - for \
            standard input). Field values are JSON when they parse as JSON (60, true, "42", {"a":1}), \
            text otherwise; dotted names nest: --field courier.name=Ana.

              islet publish-event --activity order-42 --type DeliveryAttributes --kind update \\
                --urgency important --field status=out_for_delivery --field courier.name=Ana --field progress=60

            With --url (or $ISLET_CLI_CONTENT_URL) the event goes through content-service's HTTP API \
            (POST /v1/activities/{id}/events, a backend key with write), without a Kafka client.
            """)

    @OptionGroup var kafka: KafkaOptions

    @Option(
        name: .customLong("url"),
        help: "content-service's HTTP API, e.g. http://localhost:8083: publish through it instead of Kafka (default: $ISLET_CLI_CONTENT_URL; Kafka when neither is given).")
    var url: String?

    @Option(name: .customLong("backend-key"), help: "Over HTTP: the backend key, with write (default: $ISLET_CLI_BACKEND_KEY, else $ISLET_CLI_GRPC_KEY).")
    var backendKey: String?

    @Option(name: .customLong("idempotency-key"), help: "Over HTTP: answered once; a repeat with the same key and event gets the first answer (needs --sequence).")
    var idempotencyKey: String?

    @Option(help: "A whole ActivityEvent as JSON: a file, or - for standard input. No event flags with it.")
    var json: String?

    @Option(name: .customLong("activity"), help: "The activity id, e.g. order-42 (the record key).")
    var activityId: String?

    @Option(name: .customLong("bundle-id"), help: "The app the activity lives in, e.g. com.example.food (activity ids are scoped per app; without it, the app whose token is registered for the id).")
    var bundleId: String?

    @Option(help: "start, update or end (default update).")
    var kind: String?

    @Option(name: .customLong("type"), help: "The widget's ActivityAttributes type, e.g. DeliveryAttributes.")
    var attributesType: String?

    @Option(name: [.customShort("f"), .customLong("field")], help: "A domain field, name=value (repeatable).")
    var fields: [String] = []

    @Option(name: .customLong("fields"), help: "Domain fields as one JSON object (--field values are added to it).")
    var fieldsJSON: String?

    @Option(help: "routine, important or critical (default routine).")
    var urgency: String?

    @Option(help: "The activity's event sequence (default: milliseconds since 1970, so that each call is newer).")
    var sequence: Int64?

    @Option(name: .customLong("event-id"), help: "The event's id (default: a new UUID).")
    var eventId: String?

    @Option(name: .customLong("occurred-at"), help: "When it happened, ISO 8601 (default: now).")
    var occurredAt: String?

    @Option(name: .customLong("attribute"), help: "A static ActivityAttributes value for a push-to-start, name=value (repeatable).")
    var attributes: [String] = []

    @Option(name: .customLong("start-bundle-id"), help: "Start remotely (push-to-start) in this app.")
    var startBundleId: String?

    @Option(name: .customLong("start-device-id"), help: "… on this device (the app's id for it, as registered).")
    var startDeviceId: String?

    @Option(name: .customLong("start-user-id"), help: "… or on every device of this user that registered a push-to-start token.")
    var startUserId: String?

    @Option(name: .customLong("start-environment"), help: "… in production (default) or sandbox.")
    var startEnvironment: String?

    @Option(help: "Your name for the producer, for tracing (default islet-cli).")
    var source: String?

    @Flag(name: .customLong("dry-run"), help: "Print the event's JSON instead of publishing it.")
    var dryRun = false

    private var usesEventFlags: Bool {
        activityId != nil || bundleId != nil || kind != nil || attributesType != nil || !fields.isEmpty || fieldsJSON != nil || urgency != nil
            || sequence != nil || eventId != nil || occurredAt != nil || !attributes.isEmpty || startBundleId != nil
            || startDeviceId != nil || startEnvironment != nil || source != nil
    }

    func validate() throws {
        if json != nil, usesEventFlags {
            throw ValidationError("--json gives the whole event: leave out the event flags, or leave out --json")
        }
        if idempotencyKey != nil, json == nil, sequence == nil {
            // The default sequence is the time: a repeat would be another request, refused with the key.
            throw ValidationError("--idempotency-key needs --sequence: a repeat must send the same event")
        }
        if json == nil {
            if activityId == nil { throw ValidationError("--activity is required (or give the event with --json)") }
            if attributesType == nil { throw ValidationError("--type is required (or give the event with --json)") }
        }
    }

    /// The event the arguments describe (`now` and `newID` make the defaults).
    func event(now: Date = Date(), newID: () -> String = { UUID().uuidString.lowercased() }, readInput: (String) throws -> Data = EventInput.read) throws -> ActivityEvent {
        if let json {
            let bytes = Array(try readInput(json))
            do {
                return try checked(IsletJSON.decode(ActivityEvent.self, from: bytes))
            } catch let error as MessageDecodingError {
                throw ValidationError("--json: \(error)")
            }
        }
        var domain: [String: JSONValue] = [:]
        if let fieldsJSON {
            guard case .object(let members)? = try? JSONValueParsing.parse(fieldsJSON) else {
                throw ValidationError("--fields must be a JSON object, got \(fieldsJSON)")
            }
            domain = members
        }
        for field in fields {
            try JSONValueParsing.assign(field, into: &domain, option: "--field")
        }
        var staticAttributes: [String: JSONValue] = [:]
        for attribute in attributes {
            try JSONValueParsing.assign(attribute, into: &staticAttributes, option: "--attribute")
        }
        var target: ActivityEvent.PushToStartTarget?
        switch (startBundleId, startDeviceId, startUserId) {
        case (nil, nil, nil):
            if startEnvironment != nil { throw ValidationError("--start-environment needs --start-bundle-id and --start-device-id or --start-user-id") }
        case (let bundle?, let device?, nil):
            target = .init(app: AppTarget(bundleId: bundle, environment: try Self.known(APNsEnvironment.self, startEnvironment ?? "production", option: "--start-environment")), deviceId: device)
        case (let bundle?, nil, let user?):
            target = .init(app: AppTarget(bundleId: bundle, environment: try Self.known(APNsEnvironment.self, startEnvironment ?? "production", option: "--start-environment")), userId: user)
        default:
            throw ValidationError("--start-bundle-id goes with one of --start-device-id and --start-user-id")
        }
        var occurred = now
        if let occurredAt {
            guard let date = IsletDate.parse(occurredAt) else {
                throw ValidationError("--occurred-at must be ISO 8601, e.g. 2026-11-22T10:15:30Z; got \(occurredAt)")
            }
            occurred = date
        }
        let event = ActivityEvent(
            eventId: eventId ?? newID(), activityId: activityId ?? "", kind: try Self.known(ActivityEventKind.self, kind ?? "update", option: "--kind"),
            attributesType: attributesType ?? "", fields: domain, urgency: try Self.known(Urgency.self, urgency ?? "routine", option: "--urgency"),
            occurredAt: occurred, sequence: sequence ?? Int64((now.timeIntervalSince1970 * 1_000).rounded(.down)),
            startTarget: target, attributes: staticAttributes.isEmpty ? nil : staticAttributes, source: source ?? "islet-cli",
            bundleId: bundleId)
        return try checked(event)
    }

    private func checked(_ event: ActivityEvent) throws -> ActivityEvent {
        do {
            try event.validate()
        } catch {
            throw ValidationError("the event is not valid: \(error)")
        }
        return event
    }

    static func known<Value: OpenEnum>(_ type: Value.Type, _ text: String, option: String) throws -> Value {
        let value = Value(rawValue: text)
        guard Value.knownValues.contains(value) else {
            throw ValidationError("\(option) must be one of \(Value.knownValues.map(\.rawValue).joined(separator: ", ")); got \(text)")
        }
        return value
    }

    mutating func run() async throws {
        let event = try event()
        if dryRun {
            print(try IsletJSON.encodePretty(event))
            return
        }
        if let target = try httpTarget() {
            let answer = try await Self.post(event, to: target, defaulted: defaultedFields)
            if answer.accepted {
                print(answer.text)
            } else {
                FileHandle.standardError.write(Data((answer.text + "\n").utf8))
                throw ExitCode(1)
            }
            return
        }
        let report = try await Self.publish(event, servers: kafka.servers(), security: kafka.security(), logger: kafka.logger)
        print("published \(event.kind) \(event.activityId) sequence \(event.sequence) (event \(event.eventId)) to \(report.topic) partition \(report.partition) offset \(report.offset.map(String.init) ?? "?")")
    }

    /// Where and how to post the event, when it goes over HTTP (`nil`: through Kafka).
    func httpTarget(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> EventPost.Target? {
        guard let base = url ?? environment["ISLET_CLI_CONTENT_URL"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            if idempotencyKey != nil { throw ValidationError("--idempotency-key is for the HTTP API: give --url too") }
            return nil
        }
        guard let components = URLComponents(string: base), components.scheme == "http" || components.scheme == "https", components.host != nil else {
            throw ValidationError("--url must be an http(s) URL, e.g. http://localhost:8083; got \(base)")
        }
        let key = backendKey ?? [environment["ISLET_CLI_BACKEND_KEY"], environment["ISLET_CLI_GRPC_KEY"]].lazy.compactMap { $0 }.first { !$0.isEmpty }
        guard let key, !key.isEmpty else {
            throw ValidationError("the HTTP API needs a backend key: --backend-key or ISLET_CLI_BACKEND_KEY (one of content-service's ISLET_GRPC_KEYS, with write)")
        }
        return EventPost.Target(baseURL: base, key: key, idempotencyKey: idempotencyKey)
    }

    /// The fields the command filled in itself (left out over HTTP, where the server fills them):
    /// with an idempotency key, a repeat of the command sends the same request.
    var defaultedFields: EventPost.Defaulted {
        json != nil ? [] : EventPost.Defaulted().union(eventId == nil ? .eventId : []).union(occurredAt == nil ? .occurredAt : [])
    }

    /// Posts `event` to content-service's HTTP API; the answer in one line.
    static func post(_ event: ActivityEvent, to target: EventPost.Target, defaulted: EventPost.Defaulted = []) async throws -> EventPost.Answer {
        guard let bundleId = event.bundleId else { throw ValidationError("the HTTP API needs the activity's app: --bundle-id") }
        var request = HTTPClientRequest(url: target.url(activityId: event.activityId))
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(target.key)")
        request.headers.add(name: "Content-Type", value: "application/json")
        if let key = target.idempotencyKey { request.headers.add(name: "Idempotency-Key", value: key) }
        let body = ActivityEventBody(event, bundleId: bundleId, keepingEventId: !defaulted.contains(.eventId), keepingTime: !defaulted.contains(.occurredAt))
        request.body = .bytes(ByteBuffer(bytes: try IsletJSON.encode(body)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(15))
        let bytes = Array(buffer: try await response.body.collect(upTo: 1 << 20))
        return EventPost.Answer(
            status: Int(response.status.code), body: bytes, replayed: response.headers.first(name: "Idempotent-Replayed") == "true", event: event)
    }

    /// Sends one event and returns once Kafka acknowledged it.
    static func publish(_ event: ActivityEvent, servers: String, security: [String: String] = [:], logger: Logger) async throws -> KafkaDeliveryReport {
        let producer = try KafkaProducer(
            configuration: KafkaProducerConfiguration(
                bootstrapServers: servers, clientID: "islet-cli", settings: security.merging(["message.timeout.ms": "15000"]) { $1 }),
            logger: logger)
        return try await withThrowingTaskGroup(of: KafkaDeliveryReport?.self) { group in
            group.addTask {
                try await producer.run()
                return nil
            }
            group.addTask {
                defer { producer.shutdown() }
                return try await producer.send(event)
            }
            var report: KafkaDeliveryReport?
            while let next = try await group.next() {
                if let next { report = next }
            }
            guard let report else { throw ValidationError("the producer stopped before the event was acknowledged") }
            return report
        }
    }
}

/// Reads `--json` input: a file path, or `-` for standard input.
enum EventInput {
    static func read(_ source: String) throws -> Data {
        if source == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: source) else {
            throw ValidationError("cannot read \(source)")
        }
        return data
    }
}

/// `name=value` arguments as JSON values.
enum JSONValueParsing {
    /// JSON text as a value; `nil` when it is not one JSON value.
    static func parse(_ text: String) throws -> JSONValue? {
        // Wrapped in an array: a top-level scalar is then valid JSON for every decoder.
        guard let values = try? JSONDecoder().decode([JSONValue].self, from: Data("[\(text)]".utf8)), values.count == 1 else {
            return nil
        }
        return values[0]
    }

    /// A value as given on the command line: JSON when it parses, text otherwise.
    static func value(_ text: String) -> JSONValue {
        (try? parse(text)).flatMap { $0 } ?? .string(text)
    }

    /// Puts `a.b=value` into `object` as `{"a": {"b": value}}`.
    static func assign(_ argument: String, into object: inout [String: JSONValue], option: String) throws {
        guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
            throw ValidationError("\(option) expects name=value, got \(argument)")
        }
        let path = argument[..<equals].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard !path.contains(where: \.isEmpty) else {
            throw ValidationError("\(option): \(argument[..<equals]) is not a field name (empty part)")
        }
        try set(value(String(argument[argument.index(after: equals)...])), at: path[...], in: &object, whole: String(argument[..<equals]), option: option)
    }

    private static func set(_ value: JSONValue, at path: ArraySlice<String>, in object: inout [String: JSONValue], whole: String, option: String) throws {
        let name = path.first!
        if path.count == 1 {
            guard object[name] == nil else {
                throw ValidationError("\(option): \(whole) is given twice")
            }
            object[name] = value
            return
        }
        var child: [String: JSONValue]
        switch object[name] {
        case nil: child = [:]
        case .object(let members)?: child = members
        default: throw ValidationError("\(option): \(whole) goes inside \(name), which is not an object")
        }
        try set(value, at: path.dropFirst(), in: &child, whole: whole, option: option)
        object[name] = .object(child)
    }
}
