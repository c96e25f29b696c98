import APNsSimulator
import AnalyticsConsumer
import Foundation
import IsletMessages
import NIOHTTP1
import Testing

/// One scenario's steps: the backend's events, the app's registrations in between.
struct Scenario: Sendable {
    var type: String
    var bundleId: String
    var frequent = false
    var pushToStart = false
    /// Sent by broadcast (the template says so): no token; the phones subscribe to the channel.
    var broadcast = false
    /// Fields of each event (the state field included), its kind and urgency.
    var steps: [(ActivityEventKind, Urgency, [String: JSONValue])]
    var attributes: [String: JSONValue]? = nil

    static let all: [Scenario] = [
        Scenario(
            type: "DeliveryAttributes", bundleId: "com.example.food",
            steps: [
                (.start, .routine, ["orderId": "42", "storeName": "Casa Lola", "status": "placed"]),
                (.update, .routine, ["orderId": "42", "storeName": "Casa Lola", "status": "preparing"]),
                (.update, .important, ["orderId": "42", "storeName": "Casa Lola", "status": "courier_assigned", "courier": ["name": "Ana"]]),
                (.update, .important, ["orderId": "42", "storeName": "Casa Lola", "status": "out_for_delivery", "courier": ["name": "Ana"], "progress": 30]),
                (.update, .routine, ["orderId": "42", "storeName": "Casa Lola", "status": "out_for_delivery", "courier": ["name": "Ana"], "progress": 60]),
                (.update, .important, ["orderId": "42", "storeName": "Casa Lola", "status": "arriving", "courier": ["name": "Ana"], "progress": 100]),
                (.end, .important, ["orderId": "42", "storeName": "Casa Lola", "status": "delivered", "courier": ["name": "Ana"]]),
            ]),
        Scenario(
            type: "RideAttributes", bundleId: "com.example.ride", pushToStart: true,
            steps: [
                (.start, .important, ["rideId": "7", "phase": "matching"]),
                (.update, .important, ["rideId": "7", "phase": "en_route", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"], "progress": 20]),
                (.update, .routine, ["rideId": "7", "phase": "en_route", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"], "progress": 60]),
                (.update, .important, ["rideId": "7", "phase": "arriving", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"], "progress": 95]),
                (.update, .routine, ["rideId": "7", "phase": "on_trip", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"]]),
                (.end, .important, ["rideId": "7", "phase": "dropped_off", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"]]),
            ],
            attributes: ["rideId": "7"]),
        Scenario(
            type: "MatchAttributes", bundleId: "com.example.scores", broadcast: true,
            steps: [
                (.start, .routine, ["matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "minute": 1]),
                (.update, .routine, ["matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "minute": 12]),
                (.update, .important, ["period": "goal", "matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "minute": 13, "lastEvent": "Goal by Ortiz"]),
                (.update, .routine, ["period": "live", "matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "minute": 14]),
                (.update, .routine, ["period": "halftime", "matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "minute": 45]),
                (.end, .important, ["period": "full_time", "matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "awayScore": 1, "minute": 90]),
            ]),
        // Apple's pizza sample: a delivery window the Lock Screen counts down (a ClosedRange<Date>),
        // a status enum, the toppings, the driver as a nested struct.
        Scenario(
            type: "PizzaDeliveryAttributes", bundleId: "com.example.pizza",
            steps: [
                (.start, .routine, ["orderId": "p-1", "status": "ordered", "estimatedDeliveryTime": ["2026-11-22T12:00:00Z", "2026-11-22T12:30:00Z"]]),
                (.update, .routine, ["orderId": "p-1", "status": "baking", "estimatedDeliveryTime": ["2026-11-22T12:00:00Z", "2026-11-22T12:30:00Z"],
                    "toppings": ["mozzarella", "basil"]]),
                (.update, .important, ["orderId": "p-1", "status": "on_the_way", "estimatedDeliveryTime": ["start": "2026-11-22T12:10:00Z", "end": "2026-11-22T12:25:00Z"],
                    "toppings": ["mozzarella", "basil"], "driver": ["name": "Tim", "vehicle": "scooter", "rating": 4.8]]),
                (.end, .important, ["orderId": "p-1", "status": "delivered", "estimatedDeliveryTime": ["2026-11-22T12:10:00Z", "2026-11-22T12:22:00Z"],
                    "driver": ["name": "Tim", "vehicle": "scooter"]]),
            ]),
    ]
}

/// A broadcast as the golden files hold it, like a push (``goldenView(_:role:run:)``).
func goldenView(_ broadcast: AcceptedBroadcast, run: String) throws -> JSONValue {
    .object([
        "to": "broadcast channel", "event": .string(broadcast.event), "priority": .integer(Int64(broadcast.priority)), "pushType": "liveactivity",
        "topic": .string(broadcast.bundleId), "aps": try goldenAPS(broadcast.payload, run: run),
    ])
}

/// A push as the golden files hold it: what the phone received, without what differs per run
/// (tokens, ids, dates, link signatures; the layouts are pinned by content-service's golden tests).
func goldenView(_ notification: AcceptedNotification, role: String, run: String) throws -> JSONValue {
    .object([
        "to": .string(role), "event": .string(notification.event), "priority": .integer(Int64(notification.priority)),
        "pushType": .string(notification.pushType), "topic": .string(notification.topic), "aps": try goldenAPS(notification.payload, run: run),
    ])
}

/// A payload's `aps` without what differs per run.
func goldenAPS(_ payload: String, run: String) throws -> JSONValue {
    var aps = try IsletJSON.decodeValue(JSONValue.self, from: Array(payload.utf8))["aps"]?.objectValue ?? [:]
    for key in ["timestamp", "stale-date", "dismissal-date"] where aps[key] != nil { aps[key] = "<date>" }
    if var state = aps["content-state"]?.objectValue {
        state["layout"] = state["layout"] == nil ? nil : "<layout>"
        if let links = state["links"]?.objectValue { state["links"] = .object(links.mapValues { _ in "<signed link>" }) }
        for (key, value) in state {
            if case .number(let number) = value, number > 100_000_000 { state[key] = "<date>" }
            if case .integer(let number) = value, number > 100_000_000 { state[key] = "<date>" }
        }
        aps["content-state"] = .object(state)
    }
    let text = String(decoding: JSONValue.object(aps).jsonBytes, as: UTF8.self).replacingOccurrences(of: run, with: "<run>-")
    return try IsletJSON.decodeValue(JSONValue.self, from: Array(text.utf8))
}

extension EndToEnd {
    @Suite("End to end: the happy paths", .timeLimit(.minutes(5)))
    struct HappyPathTests {
        static let goldenDirectory = Stack.repository.appendingPathComponent("Tests/EndToEndTests/Golden")

        @Test("each example type through all four services: the simulator receives the golden pushes in order, a tap becomes a click, the ledger is complete")
        func happyPaths() async throws {
            let stack = try Stack(name: "happy-paths")
            try await stack.run { driver in
                for scenario in Scenario.all {
                    try await play(scenario, driver: driver)
                }
            }
        }

        func play(_ scenario: Scenario, driver: Driver) async throws {
            if scenario.broadcast { return try await playBroadcast(scenario, driver: driver) }
            let activity = "\(driver.run)\(scenario.type)"
            let token = Driver.token(activity + "-token")
            let startToken = Driver.token(activity + "-start")
            let device = "\(driver.run)device"
            if scenario.pushToStart {
                try await driver.registerPushToStart(bundleId: scenario.bundleId, device: device, type: scenario.type, token: startToken)
            } else {
                try await driver.registerActivity(activity, token: token, type: scenario.type, bundleId: scenario.bundleId, frequent: scenario.frequent)
            }
            var requestIds: [String] = []
            for (index, (kind, urgency, fields)) in scenario.steps.enumerated() {
                let remote = scenario.pushToStart && kind == .start
                let event = driver.event(
                    activity, kind, type: scenario.type, sequence: Int64(index + 1), urgency: urgency, fields: fields,
                    startTarget: remote ? .init(app: AppTarget(bundleId: scenario.bundleId, environment: .production), deviceId: device) : nil,
                    attributes: remote ? scenario.attributes : nil)
                try await driver.publish(event)
                let id = driver.requestId(event)
                requestIds.append(id)
                _ = try await driver.received(token: remote ? startToken : token, through: id)
                if remote {
                    // iOS started the activity: the app registers the activity's own token.
                    try await driver.registerActivity(activity, token: token, type: scenario.type, bundleId: scenario.bundleId, deviceId: device)
                }
            }
            // What the phone received, in order, is the golden sequence; it is exactly the activity's
            // push requests (an end with an alert is an update, then the end), each delivered once.
            let ledger = try await Ledger.settle(bootstrap: driver.stack.bootstrap, prefix: activity, expecting: requestIds.count)
            #expect(ledger.violations.isEmpty, "\(scenario.type): \(ledger.violations)")
            #expect(ledger.outcomes.values.allSatisfy { $0.first?.result == .delivered }, "\(scenario.type): \(ledger.results)")
            let pushes = (scenario.pushToStart ? try await driver.stack.received(token: startToken) : []) + (try await driver.stack.received(token: token))
            #expect(pushes.map { $0.apnsID.lowercased() }.sorted() == ledger.requests.keys.sorted(), "\(scenario.type): each request once, nothing else")
            #expect(Set(requestIds).isSubset(of: Set(ledger.requests.keys)))
            for push in pushes {
                #expect(push.payload == ledger.requests[push.apnsID.lowercased()]?.payload, "the phone got content-service's payload unchanged")
            }
            let received = try pushes.map { try goldenView($0, role: $0.token == startToken ? "push-to-start token" : "activity token", run: driver.run) }
            try compareGolden(received, name: scenario.type, stack: driver.stack)

            // A tap on the last update's Lock Screen link becomes a click on islet.clicks.v1, naming its app.
            let last = try #require(try await driver.stack.received(token: token).last { $0.event == "update" })
            let click = try await tapLockScreenLink(of: last.payload, type: scenario.type, activity: activity, driver: driver)
            #expect(click.attributesType == scenario.type)
            #expect(click.surface == .lockScreen)
            #expect(click.app == AppTarget(bundleId: scenario.bundleId, environment: .production))

            // A tap on an element of the Lock Screen region (the delivery template has one) is
            // counted under lockScreen × that element for the app, in analytics-consumer's table.
            guard let (element, link) = try lockScreenElementLink(of: last.payload) else {
                #expect(scenario.type != "DeliveryAttributes", "the delivery template has a Lock Screen element link")
                return
            }
            let elementClick = try await tap(link, activity: activity, element: element, driver: driver)
            #expect(elementClick.surface == .lockScreen && elementClick.element == element)
            #expect(elementClick.app == AppTarget(bundleId: scenario.bundleId, environment: .production))
            var stats = ClickStats()
            for click in [click, elementClick] { stats.record(click) }
            for outcome in ledger.outcomes.values.joined() { stats.record(outcome) }
            let cell = ClickStats.Cell(app: scenario.bundleId, attributesType: scenario.type, surface: "lockScreen", element: element)
            let row = try #require(stats.rows.first { $0.cell == cell }, "\(stats.render())")
            #expect(row.taps == 1 && row.deliveredUpdates == pushes.count, "\(stats.render())")
        }

        @Test("a backend starts, updates and ends a delivery over HTTP for a phone in Chinese: the simulator receives the Chinese texts")
        func chineseOverHTTP() async throws {
            let stack = try Stack(name: "chinese-over-http")
            try await stack.run { driver in
                let (type, bundleId) = ("DeliveryAttributes", "com.example.food")
                let activity = "\(driver.run)zh-order"
                let (token, startToken, device) = (Driver.token(activity + "-token"), Driver.token(activity + "-start"), "\(driver.run)zh-device")
                // Apple's spelling of the locale, as Locale.current.identifier gives it.
                try await driver.registerPushToStart(bundleId: bundleId, device: device, type: type, token: startToken, locale: "zh_Hans_CN")
                let target = ActivityEvent.PushToStartTarget(app: AppTarget(bundleId: bundleId, environment: .production), deviceId: device)
                let steps: [(ActivityEventKind, Urgency, [String: JSONValue], String)] = [
                    (.start, .important, ["status": "placed", "orderId": "42"], "订单已接收"),
                    (.update, .important, ["status": "out_for_delivery", "orderId": "42", "progress": 60, "courier": ["name": "小王"]], "小王 正在为您送货"),
                    (.end, .important, ["status": "delivered", "orderId": "42", "progress": 100, "courier": ["name": "小王"]], "祝您用餐愉快"),
                ]
                for (index, (kind, urgency, fields, text)) in steps.enumerated() {
                    let event = driver.event(
                        activity, kind, type: type, sequence: Int64(index + 1), urgency: urgency, fields: fields,
                        startTarget: kind == .start ? target : nil, attributes: kind == .start ? ["orderId": "42", "storeName": "盒马鲜生"] : nil)
                    let (status, answer) = try await driver.post(
                        event: ActivityEventBody(event, bundleId: bundleId), activityId: activity, idempotencyKey: event.eventId)
                    #expect(status == 202, "\(kind): \(status) \(String(decoding: answer, as: UTF8.self))")
                    let receiver = kind == .start ? startToken : token
                    let pushes = try await driver.received(token: receiver, through: driver.requestId(event))
                    // An end with an alert is an alerting update, then the end: every push so far.
                    let payload = pushes.map(\.payload).joined(separator: "\n")
                    #expect(payload.contains(text), "\(kind): the phone gets \"\(text)\": \(payload)")
                    #expect(!payload.contains("Order received") && !payload.contains("Enjoy"), "\(kind): no default (English) text: \(payload)")
                    if kind == .start {
                        // iOS started the activity: the app registers its token, in the same language.
                        try await driver.registerActivity(activity, token: token, type: type, bundleId: bundleId, deviceId: device, locale: "zh-Hans-CN")
                    }
                }
                // The backend asks what became of it: ended at sequence 3, the end delivered, and
                // the dispatcher's answers to its pushes.
                let path = "/v1/activities/\(activity)?bundleId=\(bundleId)"
                var state: JSONValue = .null
                let deadline = ContinuousClock.now + .seconds(20)
                repeat {
                    let (status, body) = try await driver.get(content: path)
                    #expect(status == 200, "\(String(decoding: body, as: UTF8.self))")
                    state = try IsletJSON.decodeValue(JSONValue.self, from: body)
                    if state["latestRequest"]?["outcome"]?.stringValue == "delivered" { break }
                    try await Task.sleep(for: .milliseconds(200))
                } while ContinuousClock.now < deadline
                #expect(state["ended"] == .bool(true) && state["lastSequence"] == .integer(3) && state["live"] == .bool(false), "\(state)")
                #expect(state["latestRequest"]?["event"]?.stringValue == "end" && state["latestRequest"]?["outcome"]?.stringValue == "delivered", "\(state)")
                let (status, body) = try await driver.get(content: "/v1/activities/\(activity)/outcomes?bundleId=\(bundleId)")
                #expect(status == 200, "\(String(decoding: body, as: UTF8.self))")
                var outcomes: [JSONValue] = []
                if case .array(let items)? = try IsletJSON.decodeValue(JSONValue.self, from: body)["outcomes"] { outcomes = items }
                #expect(outcomes.count >= 3, "the start, the update, the end's alert and the end: the latest 4 kept \(outcomes)")
                #expect(outcomes.first?["result"]?.stringValue == "delivered" && outcomes.first?["apnsStatus"] == .integer(200), "\(outcomes)")
                let logged = Set(try await driver.stack.received(token: token).map(\.uniqueID))
                #expect(outcomes.first?["apnsUniqueId"]?.stringValue.map(logged.contains) == true, "the outcome names the push in the delivery log: \(outcomes)")
                // Without a backend key: refused, in JSON.
                let (refused, reason) = try await driver.get(content: path, key: "not-a-key")
                #expect(refused == 401 && (try? IsletJSON.decodeValue(JSONValue.self, from: reason))?["error"]?.stringValue == "unauthenticated")
            }
        }

        /// A match by broadcast: its first event makes the match's channel (no token anywhere); a
        /// thousand simulated phones start the activity on it; every later event is one broadcast
        /// that reaches all of them; the channel is deleted after the end (2 s in this stack).
        func playBroadcast(_ scenario: Scenario, driver: Driver) async throws {
            let activity = "\(driver.run)\(scenario.type)"
            var requestIds: [String] = []
            var channel: String?
            for (index, (kind, urgency, fields)) in scenario.steps.enumerated() {
                let event = driver.event(activity, kind, type: scenario.type, sequence: Int64(index + 1), urgency: urgency, fields: fields)
                try await driver.publish(event)
                let id = driver.requestId(event)
                requestIds.append(id)
                let outcome = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) { $0.requestId == id && $0.result.isFinal }
                #expect(outcome.result == .delivered, "\(scenario.type) \(kind): \(outcome)")
                let made = try #require(outcome.channelId, "a broadcast's outcome names its channel")
                #expect(channel == nil || channel == made, "one channel for the match")
                if channel == nil {
                    channel = made
                    // The app learns the channel through its backend, which asks content-service
                    // (once content-service has read the outcome: a moment after the dispatcher wrote it).
                    var listed: [JSONValue] = []
                    let deadline = ContinuousClock.now + .seconds(20)
                    repeat {
                        let (status, body) = try await driver.get(content: "/v1/activities/\(activity)/outcomes?bundleId=\(scenario.bundleId)&limit=1")
                        #expect(status == 200, "\(String(decoding: body, as: UTF8.self))")
                        if case .array(let outcomes)? = try IsletJSON.decodeValue(JSONValue.self, from: body)["outcomes"] { listed = outcomes }
                        if !listed.isEmpty { break }
                        try await Task.sleep(for: .milliseconds(200))
                    } while ContinuousClock.now < deadline
                    #expect(listed.first?["channelId"]?.stringValue == made, "\(listed)")
                    try await driver.stack.subscribe(1_000, to: made, bundleId: scenario.bundleId)
                }
            }
            let channelId = try #require(channel)
            let ledger = try await Ledger.settle(bootstrap: driver.stack.bootstrap, prefix: activity, expecting: requestIds.count)
            #expect(ledger.violations.isEmpty, "\(scenario.type): \(ledger.violations)")
            #expect(ledger.outcomes.values.allSatisfy { $0.first?.result == .delivered && $0.first?.channelId == channelId }, "\(ledger.results)")
            let broadcasts = try await driver.stack.broadcasts(channel: channelId)
            #expect(broadcasts.map(\.requestId).sorted() == ledger.requests.keys.sorted(), "each request once, as a broadcast")
            #expect(broadcasts.dropFirst().allSatisfy { $0.subscribers == 1_000 }, "one push for a thousand phones: \(broadcasts.map(\.subscribers))")
            #expect(try await driver.stack.received().allSatisfy { !$0.topic.hasPrefix(scenario.bundleId + ".") }, "no push to a token")
            for broadcast in broadcasts {
                #expect(broadcast.payload == ledger.requests[broadcast.requestId]?.payload, "the phones got content-service's payload unchanged")
            }
            let received = try broadcasts.map { try goldenView($0, run: driver.run) }
            try compareGolden(received, name: scenario.type, stack: driver.stack)

            // The channel goes after the end: the dispatcher deletes it and records it.
            let deadline = ContinuousClock.now + .seconds(30)
            while try await driver.stack.channels(bundleId: scenario.bundleId).contains(where: { $0.id == channelId }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(try await driver.stack.channels(bundleId: scenario.bundleId).allSatisfy { $0.id != channelId }, "the channel is deleted after the end")
            let record = try await driver.firstRecord(on: IsletTopics.broadcastChannels.name, as: BroadcastChannelRecord.self) {
                $0.channelId == channelId && $0.deletedAt != nil
            }
            #expect(record.activityId == activity && record.endedAt != nil)

            // A tap on the last update's Lock Screen link becomes a click on islet.clicks.v1.
            let last = try #require(broadcasts.last { $0.event == "update" })
            let click = try await tapLockScreenLink(of: last.payload, type: scenario.type, activity: activity, driver: driver)
            #expect(click.attributesType == scenario.type)
        }

        /// Taps the Lock Screen link of a payload the phone got, as the app forwards it to
        /// analytics-ingest; returns the click it became on islet.clicks.v1.
        func tapLockScreenLink(of pushPayload: String, type: String, activity: String, driver: Driver) async throws -> ClickEvent {
            let payload = try IsletJSON.decodeValue(JSONValue.self, from: Array(pushPayload.utf8))
            let link = try #require(payload["aps"]?["content-state"]?["links"]?["lockScreen"]?.stringValue, "\(type): a Lock Screen link")
            return try await tap(link, activity: activity, element: "widget", driver: driver)
        }

        /// The first element link of a payload's Lock Screen region (`layout.lockScreen`) and its
        /// element, as the widget reads them; `nil` when the layout has no such link.
        func lockScreenElementLink(of pushPayload: String) throws -> (element: String, link: String)? {
            let payload = try IsletJSON.decodeValue(JSONValue.self, from: Array(pushPayload.utf8))
            guard case .array(let components)? = payload["aps"]?["content-state"]?["layout"]?["lockScreen"] else { return nil }
            for component in components {
                guard case .array(let elements)? = component["richText"]?["elements"] else { continue }
                for element in elements {
                    // The element's id is in its signed link (isl_e), as the app forwards it.
                    if let link = element["link"]?.stringValue, let id = link.split(separator: "&").first(where: { $0.hasPrefix("isl_e=") }) {
                        return (String(id.dropFirst("isl_e=".count)), link)
                    }
                }
            }
            return nil
        }

        /// Taps `link` as the app forwards it to analytics-ingest; returns the click it became on
        /// islet.clicks.v1 (the activity's click on `element`).
        func tap(_ link: String, activity: String, element: String, driver: Driver) async throws -> ClickEvent {
            let tap: JSONValue = ["url": .string(link), "tappedAt": .string(IsletDate.format(Date())), "appVersion": "3.0", "osVersion": "18.1"]
            let (status, answer) = try await HTTP.request(driver.stack.url(.ingest) + "/v1/taps", method: .POST, body: tap.jsonBytes)
            #expect(status == 200 || status == 202, "tap answered \(status) \(String(decoding: answer, as: UTF8.self))")
            return try await driver.firstRecord(on: IsletTopics.clicks.name, as: ClickEvent.self) { $0.activityId == activity && $0.element == element }
        }

        /// Compares with Tests/EndToEndTests/Golden/<name>.json; `ISLET_UPDATE_GOLDEN=1` rewrites it.
        func compareGolden(_ received: [JSONValue], name: String, stack: Stack) throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let actual = try encoder.encode(received) + Data("\n".utf8)
            let file = Self.goldenDirectory.appendingPathComponent("\(name).json")
            if ProcessInfo.processInfo.environment["ISLET_UPDATE_GOLDEN"] == "1" {
                try FileManager.default.createDirectory(at: Self.goldenDirectory, withIntermediateDirectories: true)
                try actual.write(to: file)
                return
            }
            let expected = try Data(contentsOf: file)
            if expected != actual {
                let out = stack.directory.appendingPathComponent("\(name).actual.json")
                try actual.write(to: out)
                Issue.record("\(name): what the simulator received differs from \(file.lastPathComponent); compare with \(out.path) (ISLET_UPDATE_GOLDEN=1 rewrites it after review)")
            }
        }
    }
}
