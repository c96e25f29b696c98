import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing
@testable import ContentService

let templatesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Services/ContentService/Templates").path
let goldenDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden").path
let linkKey = try! LinkKey(id: "k1", secret: Array("a-content-service-test-key-32-bytes!".utf8))
let now = Date(timeIntervalSince1970: 1_795_000_000)
let app = AppTarget(bundleId: "com.example.food", environment: .production)

func assembler(_ policy: ContentPolicy = ContentPolicy()) throws -> PayloadAssembler {
    PayloadAssembler(templates: try TemplateLoader.load(directory: templatesDirectory), keyring: LinkKeyring(signing: linkKey), policy: policy)
}

func event(
    _ type: String, _ kind: ActivityEventKind = .update, sequence: Int64, urgency: Urgency = .important, at offset: TimeInterval = 0,
    _ fields: [String: JSONValue], startTarget: ActivityEvent.PushToStartTarget? = nil, attributes: [String: JSONValue]? = nil
) -> ActivityEvent {
    ActivityEvent(
        eventId: "e\(sequence)", activityId: "order-42", kind: kind, attributesType: type, fields: fields, urgency: urgency,
        occurredAt: now.addingTimeInterval(offset), sequence: sequence, startTarget: startTarget, attributes: attributes)
}

func aps(_ request: PushRequest) throws -> [String: JSONValue] {
    guard case .object(let root) = try JSONDecoder().decode(JSONValue.self, from: Data(request.payload.utf8)), case .object(let aps)? = root["aps"] else {
        throw ContentError(field: "payload", problem: "no aps")
    }
    return aps
}

@Suite("Templates as data")
struct TemplateTests {
    @Test("the four example templates load and check")
    func examples() throws {
        let templates = try TemplateLoader.load(directory: templatesDirectory)
        #expect(Set(templates.keys) == ["DeliveryAttributes", "RideAttributes", "MatchAttributes", "PizzaDeliveryAttributes"])
        #expect(templates["DeliveryAttributes"]?.states.count == 6)
    }

    @Test("a broken template is refused with its place and problem", arguments: [
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: []\nstates: {}", "states"),
        ("attributesType: X\ndefaultState: b\nlink: x\ncontentState: []\nstates: {a: {}}", "defaultState"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: [{name: f, type: string}]\nstates: {a: {}}", "contentState[0].default"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: [{name: f, type: colour, default: red}]\nstates: {a: {}}", "contentState[0].type"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: [{name: f, type: int, default: many}]\nstates: {a: {}}", "contentState[0].default"),
        ("attributesType: X\ndefaultState: a\nlink: \"{{#x}}\"\ncontentState: []\nstates: {a: {}}", "link"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: []\nlayout: {since: \"1.0\", minimal: [{richText: [{timer: eta}]}]}\nstates: {a: {}}", "layout.minimal[0].richText[0].timer"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {relevance: 500}}", "states.a.relevance"),
        ("attributesType: 9X\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {}}", "attributesType"),
        ("defaultState: a\nlink: x\ncontentState: []\nstates: {a: {}}", "attributesType"),
        ("attributesType: X\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {}}\nbroadcast: {storagePolicy: 0}", "app"),
        ("attributesType: X\napp: {bundleId: a.b, environment: production}\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {}}\nbroadcast: {storagePolicy: 2}", "broadcast.storagePolicy"),
        ("attributesType: X\napp: {bundleId: a.b, environment: production}\ndefaultState: a\nlink: x\ncontentState: []\nstates: {a: {text: Live}}\nbroadcast: {storagePolicy: 0}\ntranslations: {fr: {Live: En direct}}", "translations"),
    ])
    func broken(text: String, path: String) {
        let error = #expect(throws: TemplateError.self) { try TemplateLoader.load(text: text, file: "broken.yaml") }
        #expect(error?.path == path, "\(String(describing: error))")
        #expect(error?.file == "broken.yaml")
    }

    @Test("an element link in the collapsed island is refused at load, naming the template, the region and the element", arguments: ["minimal", "compactLeading", "compactTrailing"])
    func collapsedIslandLinks(region: String) throws {
        let text = """
            attributesType: DeliveryAttributes
            defaultState: a
            link: "app://x"
            contentState: []
            layout:
              since: "1.0"
              \(region):
                - richText: [{ icon: bag.fill }, { text: Track, element: track }]
              expanded:
                - richText: [{ text: Track, element: track }]
              lockScreen:
                - richText: [{ text: Track, element: track }]
            states: { a: {} }
            """
        let error = #expect(throws: TemplateError.self) { try TemplateLoader.load(text: text, file: "delivery.yaml") }
        #expect(error?.file == "delivery.yaml")
        #expect(error?.path == "layout.\(region)[0].richText[1].element", "\(String(describing: error))")
        #expect(error?.problem.contains("DeliveryAttributes") == true && error?.problem.contains("element track") == true, "\(String(describing: error))")
        // The same link in expanded and on the Lock Screen only: loads.
        let fine = try TemplateLoader.load(text: text.replacingOccurrences(of: ", { text: Track, element: track }]", with: "]"), file: "delivery.yaml")
        #expect(fine.layout?.lockScreen?.count == 1)
        // An empty Lock Screen region says nothing: refused (leave it out).
        let empty = #expect(throws: TemplateError.self) {
            try TemplateLoader.load(
                text: text.replacingOccurrences(of: ", { text: Track, element: track }]", with: "]")
                    .replacingOccurrences(of: "  lockScreen:\n    - richText: [{ text: Track, element: track }]", with: "  lockScreen: []"),
                file: "delivery.yaml")
        }
        #expect(empty?.path == "layout.lockScreen", "\(String(describing: empty))")
    }

    @Test("a template variable that renders nothing in every example is refused at load, naming the file, the place and the variable; one that some example fills is fine")
    func variablesRenderSomething() throws {
        let base = """
            attributesType: X
            defaultState: a
            link: "app://x/{{id}}"
            contentState: [{ name: progress, type: double, default: 0 }]
            layout:
              since: "1.0"
              compactTrailing:
                - richText: [{ text: "{{#courier.name}}Courier {{courier.name}}{{/courier.name}}" }]
                  accessibility: "Arrives at %@"
              expanded:
                - progressBar: { position: "{{progress}}" }
                  accessibility: "{{progress}} percent"
            states: { a: { text: "Order {{id}}" }, b: { alert: { title: "T", body: "{{state.text}}, {{progress}} percent" } } }
            examples:
              - { id: "1" }
              - { id: "2", courier: { name: Ana } }
            """
        let error = #expect(throws: TemplateError.self) {
            try TemplateLoader.load(text: base.replacingOccurrences(of: "%@", with: "{{etaText}}"), file: "delivery.yaml")
        }
        #expect(error?.file == "delivery.yaml" && error?.path == "layout.compactTrailing[0].accessibility", "\(String(describing: error))")
        #expect(error?.problem.contains("{{etaText}}") == true)
        // Filled by one example (courier), by a content-state default (progress, in the layout and
        // the alert), by the state (state.text): loads.
        _ = try TemplateLoader.load(text: base.replacingOccurrences(of: "%@", with: "{{{courier.name}}}"), file: "delivery.yaml")
        // A state's text is rendered before the content state: a default does not fill it there.
        let stateText = #expect(throws: TemplateError.self) {
            try TemplateLoader.load(
                text: base.replacingOccurrences(of: "%@", with: "x").replacingOccurrences(of: "Order {{id}}", with: "At {{progress}} percent"),
                file: "delivery.yaml")
        }
        #expect(stateText?.path == "states.a.text", "\(String(describing: stateText))")
        // An empty example list checks nothing and is refused; a file without examples is not checked.
        #expect(throws: TemplateError.self) {
            try TemplateLoader.load(
                text: base.replacingOccurrences(of: "%@", with: "x").replacingOccurrences(of: "examples:\n  - { id: \"1\" }\n  - { id: \"2\", courier: { name: Ana } }", with: "examples: []"),
                file: "e.yaml")
        }
        #expect(ExampleCheck.variables(in: "{{! note}}{{> part}}{{#a.b}}{{.}}{{/a.b}}{{^c}}{{{d}}}{{&e}} {{ f }}") == ["a.b", "c", "d", "e", "f"])
    }

    @Test("app versions compare number by number")
    func versions() {
        #expect(AppVersion("5.10")! > AppVersion("5.9")!)
        #expect(AppVersion("2.0")! == AppVersion("2")!)
        #expect(AppVersion("1.2.3")! < AppVersion("1.3")!)
        #expect(AppVersion("x") == nil)
    }
}

@Suite("Payload assembly")
struct PayloadTests {
    let courier: [String: JSONValue] = ["name": .string("Ana"), "photoUrl": .string("https://img.example.com/ana.jpg")]

    @Test("every field an old app version expects is there, with defaults; newer fields and the layout are left out")
    func schemaAcrossVersions() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let old = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["status": .string("preparing")]), app: app, appVersion: AppVersion("1.0")!, memory: &memory, now: now)
        guard case .object(let state)? = try aps(old.requests[0])["content-state"] else { Issue.record("no content-state"); return }
        #expect(Set(state.keys) == ["status", "headline", "etaAt"])
        #expect(state["etaAt"] == .null)
        #expect(state["headline"] == .string("Preparing your order"))

        memory = ActivityMemory()
        let new = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["status": .string("preparing"), "etaAt": .string("2026-11-17T08:30:00.000Z")]), app: app,
            appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        guard case .object(let newState)? = try aps(new.requests[0])["content-state"] else { Issue.record("no content-state"); return }
        #expect(Set(newState.keys) == ["status", "headline", "etaAt", "courierName", "progress", "layout", "links"])
        #expect(newState["courierName"] == .string(""))
        // A date as ActivityKit's default decoding reads it: seconds since 2001-01-01.
        let expected = IsletDate.parse("2026-11-17T08:30:00.000Z")!.timeIntervalSinceReferenceDate
        switch newState["etaAt"] {
        case .integer(let seconds)?: #expect(Double(seconds) == expected)
        case .number(let seconds)?: #expect(seconds == expected)
        default: Issue.record("etaAt is not a number: \(String(describing: newState["etaAt"]))")
        }
    }

    @Test("a field of the wrong type or a missing required attribute is refused, naming it")
    func invalidFields() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let wrongType = #expect(throws: ContentError.self) {
            try assembler.assemble(
                event("DeliveryAttributes", sequence: 1, ["status": .string("preparing"), "progress": .string("half")]), app: app,
                appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        }
        #expect(wrongType?.field == "fields.progress")
        let unknown = #expect(throws: ContentError.self) {
            try assembler.assemble(event("PizzaAttributes", sequence: 1, [:]), app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        }
        #expect(unknown?.field == "attributesType")
        let noOrder = #expect(throws: ContentError.self) {
            try assembler.assemble(
                event("DeliveryAttributes", .start, sequence: 1, [:], startTarget: .init(app: app, deviceId: "d1"), attributes: [:]), app: app,
                appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        }
        #expect(noOrder?.field == "attributes.orderId")
    }

    @Test("alerts: only on a change into an alerting state, never routine, at most 3 an hour; the end's alert goes on an update before it")
    func alertPolicy() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        func send(_ status: String, _ sequence: Int64, urgency: Urgency = .important, kind: ActivityEventKind = .update, at offset: TimeInterval = 0) throws -> [PushRequest] {
            try assembler.assemble(
                event("DeliveryAttributes", kind, sequence: sequence, urgency: urgency, ["status": .string(status), "courier": .object(courier)]),
                app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now.addingTimeInterval(offset)
            ).requests
        }
        #expect(try send("preparing", 1).map(\.alerting) == [false])
        #expect(try send("out_for_delivery", 2, urgency: .routine).map(\.alerting) == [false], "routine never alerts")
        memory.lastState = "preparing"
        #expect(try send("out_for_delivery", 3).map(\.alerting) == [true])
        #expect(try send("out_for_delivery", 4).map(\.alerting) == [false], "no change of state")
        #expect(try send("arriving", 5).map(\.alerting) == [true])
        memory.lastState = "preparing"
        #expect(try send("out_for_delivery", 6).map(\.alerting) == [true])
        memory.lastState = "preparing"
        #expect(try send("out_for_delivery", 7).map(\.alerting) == [false], "three an hour")
        memory.lastState = "preparing"
        #expect(try send("out_for_delivery", 8, at: 3_601).map(\.alerting) == [true], "the window moved on")

        let end = try send("delivered", 9, kind: .end, at: 3_700)
        #expect(end.map(\.event) == [.update, .end])
        #expect(end.map(\.alerting) == [true, false])
        #expect(try aps(end[0])["alert"] != nil)
        #expect(try aps(end[1])["alert"] == nil, "iOS ignores an alert on end")
        #expect(end[1].apnsTimestamp == end[0].apnsTimestamp, "one timestamp for both (one past it could pass the 2 s lead): iOS shows an equal one")
        #expect(try aps(end[1])["timestamp"] == aps(end[0])["timestamp"])
        #expect(try aps(end[1])["dismissal-date"] != nil)
    }

    @Test("timestamps only move forward; the stale date is never in the past; routine goes at 5, important at 10")
    func timesAndPriority() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let first = try assembler.assemble(
            event("MatchAttributes", sequence: 1, urgency: .routine, at: 0, ["homeScore": .integer(1)]), app: app, appVersion: AppVersion("2.1")!,
            memory: &memory, now: now)
        let second = try assembler.assemble(
            event("MatchAttributes", sequence: 2, at: -30, ["homeScore": .integer(2)]), app: app, appVersion: AppVersion("2.1")!, memory: &memory,
            now: now.addingTimeInterval(5))
        #expect(second.requests[0].apnsTimestamp > first.requests[0].apnsTimestamp)
        #expect(first.requests[0].priority == 5)
        #expect(second.requests[0].priority == 10)
        guard case .integer(let stale)? = try aps(second.requests[0])["stale-date"] else { Issue.record("no stale-date"); return }
        #expect(stale >= Int64(now.timeIntervalSince1970))
    }

    @Test("an oversized payload sheds ranked texts, lowest first, then cuts every long text (alerts too) down to a floor; only one that cannot fit at the floor is refused with its size")
    func budget() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let long = String(repeating: "Ana the very fast courier ", count: 100)  // 2.6 KB, in a text of rank 1
        let shrunk = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["status": .string("courier_assigned"), "storeName": .string(long), "courier": .object(["name": .string("Ana")])]),
            app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        #expect(shrunk.shrinks == ["texts of rank 1"])
        #expect(shrunk.requests[0].payload.utf8.count <= 4_096)
        #expect(!shrunk.requests[0].payload.contains("very fast courier Ana the very fast"))

        // A required text too long for any payload (the courier's name, in the content state, the
        // layout and the alert): cut, on a character, with an ellipsis, until it fits — not refused.
        memory = ActivityMemory()
        let name = String(repeating: "Ana the very fast courier ", count: 200) + "🚲"
        let cut = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["status": .string("out_for_delivery"), "orderId": .string("42"), "courier": .object(["name": .string(name)])]),
            app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        #expect(cut.requests[0].payload.utf8.count <= 4_096)
        #expect(cut.shrinks.last?.hasPrefix("texts cut to") == true, "\(cut.shrinks)")
        let aps = try aps(cut.requests[0])
        let courier = try #require(aps["content-state"]?["courierName"]?.stringValue)
        #expect(courier.hasSuffix("…") && courier.hasPrefix("Ana the very fast courier") && courier.count <= 1_024)
        #expect(aps["alert"]?["body"]?.stringValue?.hasSuffix("…") == true, "the alert is cut too")
        #expect(aps["content-state"]?["status"] == .string("out_for_delivery"), "the state is never cut")
        #expect(aps["content-state"]?["links"]?["lockScreen"]?.stringValue?.contains("isl_sig=") == true, "links are never cut")
        #expect(ActivityMemory.contains(cut.requests[0].payload.utf8, "fast courier".utf8))
        // Ids are never cut, however long: the order id (not a text field) stays whole.
        memory = ActivityMemory()
        let longId = String(repeating: "7", count: 100)
        let withId = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["status": .string("out_for_delivery"), "orderId": .string(longId), "courier": .object(["name": .string(name)])]),
            app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        #expect(withId.shrinks.last?.hasPrefix("texts cut to") == true)
        #expect(ActivityMemory.contains(withId.requests[0].payload.utf8, "order/\(longId)?".utf8), "the link keeps the id whole")

        // Only what cannot fit with every text at the floor is refused: a state value (never cut) of 8 KB.
        memory = ActivityMemory()
        let hopeless = #expect(throws: ContentError.self) {
            try assembler.assemble(
                event("DeliveryAttributes", sequence: 1, ["status": .string(long + long + long), "courier": .object(["name": .string("Ana")])]),
                app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        }
        #expect(hopeless?.field == "payload")
        #expect(hopeless?.problem.contains("bytes") == true)
    }

    @Test("every link in a payload verifies and names its surface and element")
    func links() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let result = try assembler.assemble(
            event("DeliveryAttributes", sequence: 3, ["status": .string("out_for_delivery"), "orderId": .string("42"), "courier": .object(courier)]),
            app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        let payload = result.requests[0].payload
        let urls = payload.components(separatedBy: "\"").filter { $0.hasPrefix("fooddelivery://") }
        #expect(urls.count >= 8)  // five surfaces; the status and courier texts expanded; the status text on the Lock Screen
        for url in urls {
            let verified = try DeepLinkCodec.verify(url, keyring: LinkKeyring(signing: linkKey), tappedAt: now.addingTimeInterval(30), receivedAt: now.addingTimeInterval(30)).get()
            #expect(verified.target.activityId == "order-42")
            #expect(verified.target.contentSequence == 3)
            #expect(verified.target.app == app, "every link names the app the content is for")
            #expect(verified.baseURL == "fooddelivery://order/42")
        }
    }

    @Test("an element's link names the surface it is drawn on: lockScreen in the Lock Screen region, islandExpanded in the expanded one")
    func elementLinkSurfaces() throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        let result = try assembler.assemble(
            event("DeliveryAttributes", sequence: 3, ["status": .string("out_for_delivery"), "orderId": .string("42"), "courier": .object(courier)]),
            app: app, appVersion: AppVersion("2.0")!, memory: &memory, now: now)
        let layout = try #require(try aps(result.requests[0])["content-state"]?["layout"])
        /// The element links of a region, as (element, surface) pairs.
        func links(_ region: String) throws -> [String: Surface] {
            var links: [String: Surface] = [:]
            guard case .array(let components)? = layout[region] else { return links }
            for component in components {
                guard case .array(let elements)? = component["richText"]?["elements"] else { continue }
                for element in elements {
                    guard let url = element["link"]?.stringValue else { continue }
                    let verified = try DeepLinkCodec.verify(url, keyring: LinkKeyring(signing: linkKey), tappedAt: now, receivedAt: now).get()
                    links[verified.target.element] = verified.target.surface
                }
            }
            return links
        }
        #expect(try links("lockScreen") == ["status": .lockScreen])
        #expect(try links("expanded") == ["status": .islandExpanded, "courier": .islandExpanded])
        for region in ["minimal", "compactLeading", "compactTrailing"] { #expect(try links(region).isEmpty, "\(region)") }
        // A template without a Lock Screen region sends none.
        var rideMemory = ActivityMemory()
        let ride = try assembler.assemble(
            event("RideAttributes", sequence: 1, ["phase": .string("matching"), "rideId": .string("r-7")]), app: app, appVersion: AppVersion("3.0")!,
            memory: &rideMemory, now: now)
        #expect(try aps(ride.requests[0])["content-state"]?["layout"]?["lockScreen"] == nil)
    }
}

@Suite("content-service's producer settings")
struct ProducerSettingsTests {
    @Test("push requests linger 1 ms and time out at the send timeout, unless the operator set them")
    func lingerAndTimeout() {
        let defaults = ContentServiceApp.producerConfiguration(.init(bootstrapServers: "broker:9092"), sendTimeout: .milliseconds(2_500))
        #expect(defaults.settings["linger.ms"] == "1")
        #expect(defaults.settings["message.timeout.ms"] == "2500")

        let chosen = ContentServiceApp.producerConfiguration(
            .init(bootstrapServers: "broker:9092", settings: ["linger.ms": "20", "message.timeout.ms": "9000"]), sendTimeout: .seconds(5))
        #expect(chosen.settings["linger.ms"] == "20")
        #expect(chosen.settings["message.timeout.ms"] == "9000")
    }
}

@Suite("content-service's memory replica")
struct MemoryReplicaTests {
    @Test("skips the push requests this process wrote (the engine has them) and replays those of another writer")
    func ownWritesSkipped() throws {
        let writer = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        guard case .send(let prepared) = try writer.prepare(event("DeliveryAttributes", sequence: 1, ["status": .string("preparing"), "orderId": .string("42")]))
        else {
            Issue.record("nothing sent")
            return
        }
        let value = try IsletJSON.encode(prepared.requests[0])
        let own = KafkaHeader(name: RequestSender.writerHeader, string: "this-process")
        func record(_ header: KafkaHeader?) -> KafkaMessage {
            KafkaMessage(
                topic: IsletTopics.pushRequests.name, partition: 0, offset: 0, key: Array("order-42".utf8), value: value,
                headers: header.map { [$0] } ?? [])
        }
        // Never connects: the loader's apply is called directly.
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let logger = quiet
        func loader(_ engine: ContentEngine) -> ContentMemoryLoader {
            ContentMemoryLoader(engine: engine, since: now, ownWrites: own, metrics: ContentMetrics(), logger: logger) { topics, since, _, _ in
                try KafkaConsumer(configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: topics, since: since), logger: logger)
            }
        }

        let reader = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        loader(reader).apply(record(own))
        #expect(reader.memory(of: "com.example.food/order-42") == nil, "its own request is not decoded again")
        loader(reader).apply(record(KafkaHeader(name: RequestSender.writerHeader, string: "another-process")))
        #expect(reader.memory(of: "com.example.food/order-42")?.latest?.requestId == prepared.requests[0].requestId)

        let restarted = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        loader(restarted).apply(record(nil))
        #expect(restarted.memory(of: "com.example.food/order-42")?.latest?.requestId == prepared.requests[0].requestId, "a request without the header is replayed")
    }
}

extension MemoryReplicaTests {
    @Test("applies only the records of activities whose partition is held: a request by the partition it is in, a push-to-start's by its activity id, an outcome by its activity id")
    func onlyHeldPartitions() throws {
        let writer = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        guard case .send(let prepared) = try writer.prepare(event("DeliveryAttributes", sequence: 1, ["status": .string("preparing"), "orderId": .string("42")]))
        else {
            Issue.record("nothing sent")
            return
        }
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let logger = quiet
        let reader = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let loader = ContentMemoryLoader(engine: reader, since: now, metrics: ContentMetrics(), logger: logger) { topics, since, _, _ in
            try KafkaConsumer(configuration: .replica(bootstrapServers: "127.0.0.1:1", topics: topics, since: since), logger: logger)
        }
        loader.learn(activityPartitions: 48)
        let key = "com.example.food/order-42"
        let update = KafkaMessage(
            topic: IsletTopics.pushRequests.name, partition: 5, offset: 0, key: Array(key.utf8), value: try IsletJSON.encode(prepared.requests[0]))
        #expect(!loader.apply(update, only: [4, 6]) && reader.memory(of: key) == nil)
        #expect(loader.apply(update, only: [5]) && reader.memory(of: key) != nil)
        #expect(!loader.apply(update, only: []), "nothing held")

        // A push-to-start request sits in its key's partition; its activity's partition decides.
        var start = prepared.requests[0]
        start.activityId = nil
        start.pushToStartKey = MessageKey.pushToStart(bundleId: app.bundleId, deviceId: "device-1", attributesType: "DeliveryAttributes")
        start.sourceActivityId = "order-9"
        start.event = .start
        let activityPartition = KafkaPartitioner.partition(ofKey: "order-9", partitions: 48)
        let keyPartition = KafkaPartitioner.partition(ofKey: start.pushToStartKey!, partitions: 48)
        try #require(activityPartition != keyPartition)
        let startRecord = KafkaMessage(
            topic: IsletTopics.pushRequests.name, partition: keyPartition, offset: 1, key: Array(start.pushToStartKey!.utf8), value: try IsletJSON.encode(start))
        #expect(!loader.apply(startRecord, only: [keyPartition]))
        #expect(loader.apply(startRecord, only: [activityPartition]) && reader.memory(of: "com.example.food/order-9")?.partition == activityPartition)

        // An outcome: by its activity's partition.
        let outcome = KafkaMessage(
            topic: IsletTopics.pushOutcomes.name, partition: 0, offset: 0, key: Array(key.utf8),
            value: try IsletJSON.encode(PushOutcome(
                requestId: prepared.requests[0].requestId, activityId: "order-42", result: .delivered, attempts: 1, completedAt: now, bundleId: app.bundleId)))
        let outcomePartition = KafkaPartitioner.partition(ofKey: "order-42", partitions: 48)
        #expect(!loader.apply(outcome, only: [outcomePartition == 0 ? 1 : 0]))
        #expect(loader.apply(outcome, only: [outcomePartition]))
    }
}

extension PartitionTokens {
    private static let offsets = Atomic<Int64>(0)

    /// Applies `record` as the next record of partition 0.
    func put(_ record: TokenRecord, key: String) {
        apply(record, key: key, partition: 0, offset: Self.offsets.add(1, ordering: .relaxed).newValue)
    }
}
