import APNsSimulator
import AsyncHTTPClient
import ContentService
import Foundation
import IsletKafka
import IsletMessages
import JWTKit
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TokenRegistry

/// The demo's logger: errors only.
public let quiet: Logger = {
    var logger = Logger(label: "islet.demo")
    logger.logLevel = .error
    return logger
}()

struct Claims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The app, the backend, and a view of what the phone received.
public struct World: Sendable {
    let play: DemoEndpoints
    public let producer: KafkaProducer
    let jwt: String
    let keys: JWTKeyCollection
    let kid: JWKIdentifier
    let http = World.client
    let started = Date()

    /// Up to 256 connections to a host: registrations in flight at once (`memory --lanes`) are
    /// not queued behind AsyncHTTPClient's default of 8 connections.
    static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 256
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()
    /// This run's id: every activity, token and device of the run is named after it.
    public let run = String(UUID().uuidString.prefix(6).lowercased())

    public init(endpoints play: DemoEndpoints, producer: KafkaProducer) async throws {
        self.play = play
        self.producer = producer
        let parts = play.jwtKey.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw DemoFailure("--jwt-key must be kid=secret") }
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: parts[1]), digestAlgorithm: .sha256, kid: JWKIdentifier(string: parts[0]))
        jwt = try await keys.sign(Claims(sub: "demo-user", exp: .init(value: Date().addingTimeInterval(3_600))), kid: JWKIdentifier(string: parts[0]))
        (self.keys, kid) = (keys, JWKIdentifier(string: parts[0]))
    }

    /// A JWT for another user of the app (benchmarks spread their registrations over many users, as
    /// real apps do: token-registry serializes one user's registrations, for the quota).
    public func jwt(forUser user: String) async throws -> String {
        try await keys.sign(Claims(sub: .init(value: user), exp: .init(value: Date().addingTimeInterval(3_600))), kid: kid)
    }

    // MARK: The food order

    public func food() async throws {
        let order = "order-\(run)"
        let token = Self.token("f00d" + run)
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        heading("A food order (\(order)): from the kitchen to the door")
        step("app", "the user orders; the app starts the Live Activity and registers its push token")
        let answer = try await put(
            "/v1/activities/\(order)/token",
            RegisterActivityTokenRequest(
                token: token, attributesType: "DeliveryAttributes", app: app, frequentUpdatesEnabled: false, appVersion: "2.1",
                activityStartedAt: Date(), ticket: try await ticket(activityId: order, bundleId: app.bundleId)))
        service("token-registry", answer)
        // iOS 26: the app's home-screen order widget takes WidgetKit pushes; the template says which
        // of the order's states refresh it (delivery.yaml, `widgets`).
        let device = "phone-\(run)"
        let widgetToken = Self.token("w1d6" + run)
        step("app", "the app's order widget reports its push token (WidgetPushHandler); the app registers it for OrderStatusWidget")
        service(
            "token-registry",
            try await put(
                "/v1/apps/\(app.bundleId)/devices/\(device)/widgets/OrderStatusWidget",
                RegisterWidgetTokenRequest(token: widgetToken, environment: app.environment, appVersion: "2.1")))

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
            if index == 3, let backendKey = play.backendKey {
                // One step as a backend without a Kafka client sends it: one HTTPS call.
                step("backend", "\(what): \(kind.rawValue) \(status) (\(urgency.rawValue)) by POST /v1/activities/\(order)/events")
                service("content-service", try await postEvent(event, key: backendKey))
            } else {
                step("backend", "\(what): \(kind.rawValue) \(status) (\(urgency.rawValue)) on islet.activity-events.v1")
                try await producer.send(event, to: IsletTopics.activityEvents.name)
            }
            let requestId = RequestIds.content(bundleId: app.bundleId, activityId: order, eventId: event.eventId)
            last = try await received(token: token, through: requestId)
            if kind == .end {
                // The end always refreshes the widget (the order is done): wait for that push.
                let reloads = try await received(token: widgetToken, through: RequestIds.widget(of: requestId, deviceId: device))
                service(
                    "phone (widget)",
                    "\(reloads.count) WidgetKit pushes, one per state the template lists (placed, courier_assigned, out_for_delivery) and the end: "
                        + (reloads.last.map { "each \($0.pushType) p\($0.priority) \($0.payload)" } ?? ""))
            }
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

    public func ride() async throws {
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
                activityStartedAt: Date(), deviceId: device, ticket: try await ticket(activityId: ride, bundleId: app.bundleId))))

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
        let outcome = try await firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) { $0.requestId == requestId && $0.result.isFinal }
        service("islet.push-outcomes.v1", "\(outcome.result.rawValue): APNs \(outcome.apns.map { "\($0.status) \($0.reason ?? "")" } ?? "-") after \(outcome.attempts) attempt(s)")
        let state = try await waitForRegistry("/v1/activities/\(ride)?bundleId=\(app.bundleId)") { $0.contains("\"invalidated\"") }
        service("token-registry", state)
    }

    // MARK: The match, by broadcast

    /// A match followed by a thousand phones: one broadcast per goal instead of a thousand pushes.
    public func match() async throws {
        let match = "match-\(run)"
        let app = AppTarget(bundleId: "com.example.scores", environment: .production)
        heading("A match (\(match)) by broadcast (iOS 18): one push for a thousand phones")
        var fields: [String: JSONValue] = [
            "matchId": .string(run), "homeTeam": .string("Lions"), "awayTeam": .string("Bears"), "period": .string("live"), "minute": .integer(1),
        ]
        func send(_ kind: ActivityEventKind, _ urgency: Urgency, _ sequence: Int64, _ what: String) async throws -> [String] {
            let event = ActivityEvent(
                eventId: "match-\(run)-\(sequence)", activityId: match, kind: kind, attributesType: "MatchAttributes", fields: fields, urgency: urgency,
                occurredAt: Date(), sequence: sequence, source: "scores-feed", bundleId: app.bundleId)
            step("backend", "\(what): \(kind.rawValue) on islet.activity-events.v1")
            try await producer.send(event, to: IsletTopics.activityEvents.name)
            let content = RequestIds.content(bundleId: app.bundleId, activityId: match, eventId: event.eventId)
            // An end with an alert is an alerting update first, then the end.
            return kind == .end && urgency != .routine
                ? [RequestIds.alertBeforeEnd(bundleId: app.bundleId, activityId: match, eventId: event.eventId), content] : [content]
        }

        let kickOff = try await send(.update, .routine, 1, "kick-off (no phone follows yet)")
        let first = try await firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) { $0.requestId == kickOff[0] && $0.result.isFinal }
        guard let channel = first.channelId else { throw DemoFailure("the match's first broadcast names no channel: \(first)") }
        let record = try await firstRecord(on: IsletTopics.broadcastChannels.name, as: BroadcastChannelRecord.self) { $0.channelId == channel }
        service("apns-dispatcher", "made the match's channel \(channel) (message-storage-policy \(record.storagePolicy)) with APNs; on islet.broadcast-channels.v1")
        service("islet.push-outcomes.v1", "\(first.result.rawValue) on channel \(channel)")

        step("app", "1,000 phones start the match's activity on the channel (input-push-channel; simulated)")
        _ = try await post(
            "\(play.simulator)/admin/subscribers", ["bundleId": .string(app.bundleId), "channelId": .string(channel), "count": .integer(1_000)])

        if let backendKey = play.backendKey {
            // One more fan, whose phone the backend starts the match on (the app is not running).
            let (fan, fanToken) = ("fan-\(run)", Self.token("fa11" + run))
            step("app", "a fan's iPhone registers its push-to-start token for MatchAttributes")
            service("token-registry", try await put(
                "/v1/apps/\(app.bundleId)/devices/\(fan)/push-to-start/MatchAttributes",
                RegisterPushToStartTokenRequest(token: fanToken, environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0")))
            let join = ActivityEvent(
                eventId: "match-\(run)-fan", activityId: match, kind: .start, attributesType: "MatchAttributes", fields: fields, urgency: .important,
                occurredAt: Date(), sequence: 1, startTarget: .init(app: app, deviceId: fan),
                attributes: ["matchId": .string(run), "home": .string("Lions"), "away": .string("Bears")], source: "scores-feed", bundleId: app.bundleId)
            step("backend", "the fan follows the match: start on their phone by POST /v1/activities/\(match)/events (push-to-start on the channel)")
            let answer = try await postEventWhenReady(join, key: backendKey)
            service("content-service", answer)
            // The start's id is in the answer (it derives from the match, the phone and its token's fingerprint).
            let body = try IsletJSON.decodeValue(JSONValue.self, from: Array(answer.drop { $0 != " " }.dropFirst().utf8))
            guard case .array(let ids)? = body["requestIds"], let startId = ids.first?.stringValue else { throw DemoFailure("no request id in \(answer)") }
            _ = try await received(token: fanToken, through: startId)
        }

        fields["period"] = .string("goal")
        fields["homeScore"] = .integer(1)
        fields["minute"] = .integer(23)
        fields["lastEvent"] = .string("Goal by Ortiz")
        try await broadcasts(channel: channel, through: try await send(.update, .important, 2, "goal!"))
        fields["period"] = .string("full_time")
        fields["minute"] = .integer(90)
        fields["lastEvent"] = .string("")
        try await broadcasts(channel: channel, through: try await send(.end, .important, 3, "full time"))
        let stats = try await simulatorStats()
        func count(_ key: String) -> Int64 { if case .integer(let value)? = stats[key] { value } else { 0 } }
        service("APNs simulator", "\(count("broadcasts")) broadcasts reached \(count("broadcastDeliveries")) activities in all; the channel is deleted 4 hours after the end")
    }

    /// Waits until the simulator accepted the broadcasts `requestIds` on `channel`; prints them as the phones got them.
    func broadcasts(channel: String, through requestIds: [String]) async throws {
        let query = channel.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? channel
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let response = try await http.execute(HTTPClientRequest(url: "\(play.simulator)/admin/broadcasts?channel=\(query)"), timeout: .seconds(5))
            let all = try IsletJSON.decodeValue([AcceptedBroadcast].self, from: Array(buffer: try await response.body.collect(upTo: 64 << 20)))
            let wanted = all.filter { requestIds.contains($0.requestId.lowercased()) }
            if wanted.count == requestIds.count {
                for broadcast in wanted {
                    let aps = (try? IsletJSON.decodeValue(JSONValue.self, from: Array(broadcast.payload.utf8)))?["aps"]
                    var parts = ["\(broadcast.event) p\(broadcast.priority) \(broadcast.payloadBytes) B"]
                    if let period = aps?["content-state"]?["period"]?.stringValue { parts.append(period) }
                    if let alert = aps?["alert"]?["title"]?.stringValue { parts.append("alert \"\(alert)\"") }
                    print("          ↳ \(broadcast.subscribers) phones, one push: \(parts.joined(separator: " · "))")
                }
                return
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DemoFailure("the simulator did not receive broadcasts \(requestIds) within 30 s: see the services' logs in .islet-run/demo/")
    }

    func simulatorStats() async throws -> JSONValue {
        let response = try await http.execute(HTTPClientRequest(url: "\(play.simulator)/admin/stats"), timeout: .seconds(5))
        return try IsletJSON.decodeValue(JSONValue.self, from: Array(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    // MARK: Pieces

    public static func token(_ seed: String) -> String {
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
        if let channel = aps?["input-push-channel"]?.stringValue { parts.append("push-to-start on channel \(channel)") }
        return parts.joined(separator: " · ")
    }

    func notifications(token: String) async throws -> [AcceptedNotification] {
        let response = try await http.execute(HTTPClientRequest(url: "\(play.simulator)/admin/notifications?token=\(token)"), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 64 << 20)
        return try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: body))
    }

    /// The activity's ticket, as its backend signs it for the demo's user (nil without a ticket key).
    func ticket(activityId: String, bundleId: String) async throws -> String? {
        guard let key = play.ticketKey else { return nil }
        let parts = key.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { throw DemoFailure("--ticket-key must be kid=secret") }
        return try await ActivityTickets.sign(
            .init(user: "demo-user", activityId: activityId, bundleId: bundleId, expires: Date().addingTimeInterval(3_600)),
            kid: parts[0], secret: Array(parts[1].utf8))
    }

    /// - Parameter jwt: the user's token (default: the demo's user).
    public func put<Body: Encodable>(_ path: String, _ body: Body, jwt: String? = nil) async throws -> String {
        var request = HTTPClientRequest(url: play.registry + path)
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(jwt ?? self.jwt)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(try IsletJSON.encode(body))
        return try await answer(request)
    }

    func post(_ url: String, _ body: [String: JSONValue]) async throws -> String {
        try await postRaw(url, JSONValue.object(body).jsonBytes)
    }

    /// `event` through content-service's HTTP API (docs/http-api.md), with an `Idempotency-Key`.
    func postEvent(_ event: ActivityEvent, key: String) async throws -> String {
        try await answer(try eventRequest(event, key: key))
    }

    /// ``postEvent(_:key:)``, sent again while content-service answers 409 with `Retry-After` (a
    /// push-to-start on a broadcast channel before it has read the channel), for at most 30 s.
    func postEventWhenReady(_ event: ActivityEvent, key: String) async throws -> String {
        let deadline = Date().addingTimeInterval(30)
        while true {
            let response = try await http.execute(try eventRequest(event, key: key), timeout: .seconds(15))
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            if response.status.code == 409, response.headers.first(name: "Retry-After") != nil, Date() < deadline {
                try await Task.sleep(for: .milliseconds(200))
                continue
            }
            guard (200..<300).contains(response.status.code) else { throw DemoFailure("POST /v1/activities/\(event.activityId)/events answered \(response.status.code): \(text)") }
            return "\(response.status.code) \(text)"
        }
    }

    func eventRequest(_ event: ActivityEvent, key: String) throws -> HTTPClientRequest {
        guard let bundleId = event.bundleId else { throw DemoFailure("an event over HTTP names its app") }
        var request = HTTPClientRequest(url: "\(play.content)/v1/activities/\(event.activityId)/events")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Idempotency-Key", value: event.eventId)
        request.body = .bytes(try IsletJSON.encode(ActivityEventBody(event, bundleId: bundleId)))
        return request
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
        let progress = try await TopicSnapshot.read([topic], bootstrapServers: play.bootstrap, timeout: .seconds(30), logger: quiet) {
            $0.latest.flatMap { try? IsletJSON.decode(Message.self, from: $0.value ?? []) }.map(matches) ?? false
        }
        guard !progress.timedOut, let message = progress.messages.last, let decoded = try? IsletJSON.decode(Message.self, from: message.value ?? []) else {
            throw DemoFailure("no matching record on \(topic) within 30 s")
        }
        return decoded
    }
}

/// Pushes already printed (the demo prints each once).
final class Printed: Sendable {
    static let shared = Printed()
    private let seen = Mutex<Set<String>>([])
    func contains(_ key: String) -> Bool { seen.withLock { $0.contains(key) } }
    func insert(_ key: String) { seen.withLock { _ = $0.insert(key) } }
}
