import APNsSimulator
import ContentService
import Crypto
import Foundation
import IsletKafka
import IsletMessages
import NIOHTTP1
import TokenRegistry

/// The outside world of a run: the iOS app (registers tokens, forwards taps) and a backend
/// (publishes domain events), against a running ``Stack``.
final class Driver: Sendable {
    let stack: Stack
    let producer: KafkaProducer
    private let producing: Task<Void, any Error>
    /// A prefix unique to the run: every activity id starts with it, so the ledger reads only this run.
    let run: String

    init(stack: Stack, run: String = "e2e-\(UUID().uuidString.prefix(8).lowercased())-") throws {
        self.stack = stack
        self.run = run
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: stack.bootstrap), logger: e2eLogger)
        self.producer = producer
        producing = Task { try await producer.run() }
    }

    func close() async {
        producer.shutdown()
        _ = try? await producing.value
    }

    /// A 32-byte device token derived from `seed` (SHA-256, lowercase hex): distinct seeds, distinct tokens.
    static func token(_ seed: String) -> String {
        SHA256.hash(data: Array(seed.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    // MARK: The app

    /// Registers an activity's update token with token-registry (retried while the registry is down); returns the HTTP status.
    @discardableResult
    func registerActivity(
        _ activityId: String, token: String, type: String, bundleId: String, appVersion: String = "3.0", frequent: Bool = false,
        deviceId: String? = nil, user: String = "user-1", locale: String? = nil, retryFor: Duration = .seconds(90), registry: String? = nil
    ) async throws -> Int {
        let body = RegisterActivityTokenRequest(
            token: token, attributesType: type, app: AppTarget(bundleId: bundleId, environment: .production), frequentUpdatesEnabled: frequent,
            appVersion: appVersion, activityStartedAt: Date(), deviceId: deviceId, locale: locale)
        return try await put("/v1/activities/\(activityId)/token", try IsletJSON.encode(body), user: user, retryFor: retryFor, registry: registry)
    }

    @discardableResult
    func registerPushToStart(
        bundleId: String, device: String, type: String, token: String, appVersion: String = "3.0", user: String = "user-1", locale: String? = nil
    ) async throws -> Int {
        let body = RegisterPushToStartTokenRequest(
            token: token, environment: .production, frequentUpdatesEnabled: false, appVersion: appVersion, locale: locale)
        return try await put("/v1/apps/\(bundleId)/devices/\(device)/push-to-start/\(type)", try IsletJSON.encode(body), user: user, retryFor: .seconds(90))
    }

    /// `registry`: the instance's base URL (default: the stack's token-registry).
    func put(_ path: String, _ body: [UInt8], user: String, retryFor: Duration, registry: String? = nil) async throws -> Int {
        let jwt = try await stack.jwt(user: user)
        let deadline = ContinuousClock.now + retryFor
        while true {
            do {
                let (status, answer) = try await HTTP.request(
                    (registry ?? stack.url(.registry)) + path, method: .PUT, headers: [("Authorization", "Bearer \(jwt)")], body: body, timeout: .seconds(10))
                if status < 500 || ContinuousClock.now > deadline {
                    guard (200..<300).contains(status) else { throw E2EFailure("registry: PUT \(path) → \(status) \(String(decoding: answer, as: UTF8.self))", status: status) }
                    return status
                }
            } catch let error as E2EFailure {
                throw error
            } catch {
                if ContinuousClock.now > deadline { throw error }
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// The app asks token-registry for the content of an activity its backend announced
    /// (`GET /v1/activities/{id}/content`, its user's JWT and the activity's ticket); asked again
    /// while the answer is 404 or 503 (the event not read yet), for at most `retryFor`.
    func firstContent(_ activityId: String, bundleId: String, ticket: String, user: String, retryFor: Duration = .zero) async throws -> (Int, [UInt8]) {
        let jwt = try await stack.jwt(user: user)
        let deadline = ContinuousClock.now + retryFor
        while true {
            let (status, body) = try await HTTP.request(
                stack.url(.registry) + "/v1/activities/\(activityId)/content?bundleId=\(bundleId)", method: .GET,
                headers: [("Authorization", "Bearer \(jwt)"), ("Islet-Activity-Ticket", ticket)], body: nil, timeout: .seconds(10))
            if ![404, 503].contains(status) || ContinuousClock.now > deadline { return (status, body) }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    // MARK: The backend

    func publish(_ event: ActivityEvent) async throws {
        try await producer.send(event, to: IsletTopics.activityEvents.name)
    }

    /// Sends `body` to content-service's HTTP API for `activityId` as the e2e backend would
    /// (`POST /v1/activities/{id}/events`, its backend key); returns the status and the answer.
    func post(event body: ActivityEventBody, activityId: String, idempotencyKey: String) async throws -> (Int, [UInt8]) {
        try await HTTP.request(
            stack.url(.content) + "/v1/activities/\(activityId)/events", method: .POST,
            headers: [
                ("Authorization", "Bearer \(stack.backendKey)"), ("Content-Type", "application/json"), ("Idempotency-Key", idempotencyKey),
            ],
            body: try IsletJSON.encode(body), timeout: .seconds(10))
    }

    /// `GET` a path of content-service's HTTP API with the backend's key (or `key`): the status and the body.
    func get(content path: String, key: String? = nil) async throws -> (Int, [UInt8]) {
        try await HTTP.request(
            stack.url(.content) + path, method: .GET, headers: [("Authorization", "Bearer \(key ?? stack.backendKey)")], body: nil, timeout: .seconds(10))
    }

    /// The example templates' apps, by attributes type.
    static let apps = [
        "DeliveryAttributes": "com.example.food", "RideAttributes": "com.example.ride", "MatchAttributes": "com.example.scores",
        "PizzaDeliveryAttributes": "com.example.pizza",
    ]

    /// An event of the backend; it names its app (`bundleId`, by default its type's app), as backends do.
    func event(
        _ activity: String, _ kind: ActivityEventKind, type: String, sequence: Int64, urgency: Urgency = .routine, fields: [String: JSONValue],
        startTarget: ActivityEvent.PushToStartTarget? = nil, attributes: [String: JSONValue]? = nil, bundleId: String? = nil
    ) -> ActivityEvent {
        ActivityEvent(
            eventId: "\(activity)-\(sequence)", activityId: activity, kind: kind, attributesType: type, fields: fields, urgency: urgency,
            occurredAt: Date(), sequence: sequence, startTarget: startTarget, attributes: attributes, source: "e2e-backend",
            bundleId: bundleId ?? startTarget?.app.bundleId ?? Self.apps[type])
    }

    /// The request id content-service gives the event's push (deterministic).
    func requestId(_ event: ActivityEvent, bundleId: String? = nil) -> String {
        RequestIds.content(
            bundleId: bundleId ?? event.bundleId ?? event.startTarget?.app.bundleId ?? Self.apps[event.attributesType] ?? "",
            activityId: event.activityId, eventId: event.eventId)
    }

    /// Waits until the simulator accepted the push `apnsId` for `token`; returns every push to the token so far.
    func received(token: String, through apnsId: String, timeout: Duration = .seconds(60)) async throws -> [AcceptedNotification] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let all = try await stack.received(token: token)
            if all.contains(where: { $0.apnsID.lowercased() == apnsId.lowercased() }) { return all }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw E2EFailure("the simulator did not receive push \(apnsId) to \(token.prefix(8))… within \(timeout); logs in \(stack.directory.path)")
    }

    /// The first record on `topic` (from its start) that decodes as `Message` and matches, within `timeout`.
    func firstRecord<Message: IsletMessage>(on topic: String, as type: Message.Type, timeout: Duration = .seconds(60), where matches: (Message) -> Bool) async throws -> Message {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            for message in try await readToEnd([topic], bootstrap: stack.bootstrap) {
                if let decoded = try? IsletJSON.decode(Message.self, from: message.value ?? []), matches(decoded) { return decoded }
            }
            try await Task.sleep(for: .milliseconds(500))
        }
        throw E2EFailure("no matching record on \(topic) within \(timeout)")
    }
}

// Literals for the scenarios' fields.
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByDictionaryLiteral, ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(Dictionary(elements) { $1 }) }
}
