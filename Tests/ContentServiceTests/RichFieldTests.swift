import Foundation
import IsletMessages
import Testing
@testable import ContentService

/// Content-state kinds beyond scalars (issue 60): `dateRange` (a `ClosedRange<Date>`), `enum`
/// (cases per app version), `array` and `object` (nested `Codable` structs), each checked at load
/// and per event, the refusal naming the field.
@Suite("Template kinds: date ranges, enums, arrays and nested objects")
struct RichFieldTests {
    static let header = "attributesType: X\ndefaultState: a\nlink: x\nstates: {a: {}}\ncontentState:\n"

    @Test("a broken field of a richer kind is refused at load with its place and problem", arguments: [
        ("  - { name: s, type: enum, default: a }", "contentState[0].values"),
        ("  - { name: s, type: enum, values: [a, a], default: a }", "contentState[0].values[1]"),
        ("  - { name: s, type: enum, values: [a, b], default: c }", "contentState[0].default"),
        ("  - { name: s, type: enum, since: \"2.0\", values: [a, { value: b, since: \"1.0\" }], default: a }", "contentState[0].values[1].since"),
        ("  - { name: s, type: string, values: [a], default: a }", "contentState[0].values"),
        ("  - { name: l, type: array, default: [] }", "contentState[0].items"),
        ("  - { name: l, type: array, items: { type: int }, default: [1, x] }", "contentState[0].default"),
        ("  - { name: l, type: array, items: { name: n, type: int }, default: [] }", "contentState[0].items"),
        ("  - { name: o, type: object, optional: true }", "contentState[0].fields"),
        ("  - { name: o, type: object, optional: true, fields: [{ name: a, type: int, default: 0 }, { name: a, type: int, default: 1 }] }",
            "contentState[0].fields[1].name"),
        ("  - { name: o, type: object, optional: true, fields: [{ name: t, type: string, default: \"\", text: true }] }", "contentState[0].fields[0].text"),
        ("  - { name: r, type: dateRange, default: [\"2026-11-18T08:30:00Z\", \"2026-11-18T08:00:00Z\"] }", "contentState[0].default"),
        ("  - { name: s, type: enum, values: [a, { value: b, olderApps: a }], default: a }", "contentState[0].values[1].olderApps"),
        ("  - { name: s, type: enum, values: [a, { value: b, since: \"1.1\" }, { value: c, since: \"1.2\", olderApps: b }], default: a }",
            "contentState[0].values[2].olderApps"),
        ("  - { name: s, type: enum, values: [a, { value: b, since: \"1.2\" }], default: b }", "contentState[0].default"),
        ("  - { name: s, type: enum, values: [a], default: null }", "contentState[0].default"),
        ("  - { name: l, type: array, items: { type: int }, default: null }", "contentState[0].default"),
        ("  - { name: n, type: int, default: 0 }\nexamples: [{ n: many }]", "examples[0]"),
        ("  - { name: s, type: enum, values: [a, { value: b, since: \"1.2\" }], required: true }\nexamples: [{ s: b }]", "examples[0]"),
    ])
    func brokenAtLoad(field: String, path: String) {
        let error = #expect(throws: TemplateError.self) { try TemplateLoader.load(text: Self.header + field, file: "kinds.yaml") }
        #expect(error?.path == path, "\(String(describing: error))")
    }

    static let pizza: [String: JSONValue] = [
        "status": .string("on_the_way"), "orderId": .string("p-1"),
        "estimatedDeliveryTime": .array([.string("2026-11-18T08:10:00Z"), .string("2026-11-18T08:25:00Z")]),
        "toppings": .array([.string("mozzarella"), .string("basil")]),
        "driver": .object(["name": .string("Tim"), "vehicle": .string("car")]),
    ]

    func contentState(_ fields: [String: JSONValue], version: String) throws(ContentError) -> [String: JSONValue] {
        var memory = ActivityMemory()
        let result = try (try! assembler()).assemble(
            event("PizzaDeliveryAttributes", sequence: 1, fields), app: app, appVersion: AppVersion(version)!, locale: nil, memory: &memory, now: now)
        guard case .object(let root) = try! JSONDecoder().decode(JSONValue.self, from: Data(result.requests[0].payload.utf8)),
            case .object(let state)? = root["aps"]?["content-state"]
        else { return [:] }
        return state
    }

    @Test("a range is [lower, upper] in seconds since 2001, as ClosedRange<Date> encodes; nested values as their structs encode")
    func encoded() throws {
        let state = try contentState(Self.pizza, version: "1.2")
        let lower = Date(timeIntervalSince1970: 1_794_989_400).timeIntervalSinceReferenceDate
        guard case .array(let ends)? = state["estimatedDeliveryTime"] else { Issue.record("not an array"); return }
        let seconds = ends.map { end -> Double? in
            switch end {
            case .integer(let n): Double(n)
            case .number(let n): n
            default: nil
            }
        }
        #expect(seconds == [lower, lower + 900])
        #expect(state["toppings"] == .array([.string("mozzarella"), .string("basil")]))
        #expect(state["driver"] == .object(["name": .string("Tim"), "vehicle": .string("car"), "rating": .null]))
        #expect(state["status"] == .string("on_the_way"))
        // App 1.0 decodes neither the enum, the array nor the struct.
        let old = try contentState(Self.pizza, version: "1.0")
        #expect(Set(old.keys) == ["driverName", "estimatedDeliveryTime"])
    }

    @Test("a case newer than the activity's app becomes its olderApps case for it")
    func caseNewerThanTheApp() throws {
        var fields = Self.pizza
        fields["status"] = .string("at_the_door")
        #expect(try contentState(fields, version: "1.1")["status"] == .string("on_the_way"))
        #expect(try contentState(fields, version: "1.2")["status"] == .string("at_the_door"))
    }

    @Test("an event breaking a richer kind is refused, naming the field", arguments: [
        ("estimatedDeliveryTime", JSONValue.array([.string("2026-11-18T08:25:00Z"), .string("2026-11-18T08:10:00Z")]), "fields.estimatedDeliveryTime",
            "must not end before it starts"),
        ("estimatedDeliveryTime", .string("2026-11-18T08:25:00Z"), "fields.estimatedDeliveryTime", "must be [start, end]"),
        ("estimatedDeliveryTime", .object(["start": .string("soon"), "end": .integer(1_795_000_000)]), "fields.estimatedDeliveryTime", "start"),
        ("status", .string("lost"), "fields.status", "must be one of ordered, baking, on_the_way, at_the_door, delivered"),
        ("toppings", .array([.string("basil"), .bool(true)]), "fields.toppings[1]", "must be a string"),
        ("toppings", .string("basil"), "fields.toppings", "must be an array"),
        ("driver", .object(["name": .string("Tim"), "vehicle": .string("rocket")]), "fields.driver.vehicle", "must be one of scooter, bike, car"),
        ("driver", .string("Tim"), "fields.driver", "must be an object"),
    ])
    func refused(name: String, value: JSONValue, field: String, problem: String) {
        var fields = Self.pizza
        fields[name] = value
        let error = #expect(throws: ContentError.self) { try contentState(fields, version: "1.2") }
        #expect(error?.field == field)
        #expect(error?.problem.contains(problem) == true, "\(String(describing: error))")
    }

    /// A template with an enum whose newer case has no stand-in, an optional one, an array and a
    /// nested member of a later version.
    static let versioned = """
        attributesType: V
        defaultState: a
        link: x
        states: {a: {}}
        contentState:
          - { name: s, type: enum, since: "1.0", values: [a, { value: b, since: "1.2" }], required: true }
          - { name: o, type: enum, since: "1.0", values: [a, { value: b, since: "1.2" }], optional: true }
          - { name: l, type: array, items: { type: int }, default: [] }
          - name: d
            type: object
            optional: true
            fields: [{ name: x, type: int, default: 0 }, { name: y, type: int, since: "1.2", default: 0 }]
        """

    func versioned(_ fields: [String: JSONValue], version: AppVersion) throws(ContentError) -> [String: JSONValue] {
        let template = try! TemplateLoader.load(text: Self.versioned, file: "v.yaml")
        let builder = ContentBuilder(template: template)
        return try builder.contentState(fields: fields, context: [:], appVersion: version)
    }

    @Test("per app version: a case without a stand-in is refused for older apps, null for an optional field; a nested member only from its version")
    func perVersion() throws {
        let fields: [String: JSONValue] = ["s": .string("b"), "o": .string("b"), "d": .object(["x": .integer(1), "y": .integer(2)])]
        let error = #expect(throws: ContentError.self) { try versioned(fields, version: AppVersion("1.1")!) }
        #expect(error?.field == "fields.s")
        var older = fields
        older["s"] = .string("a")
        let state = try versioned(older, version: AppVersion("1.1")!)
        #expect(state["o"] == .null, "an optional enum's newer case is nil for an older app")
        #expect(state["d"] == .object(["x": .integer(1)]), "y is 1.2's")
        #expect(try versioned(fields, version: AppVersion("1.2")!)["d"] == .object(["x": .integer(1), "y": .integer(2)]))
        // An app of unknown version (a broadcast, a token not read yet) is sent no newer case.
        #expect(throws: ContentError.self) { try versioned(fields, version: .unknown) }
        #expect(try versioned(older, version: .unknown)["o"] == .null)
        // null in an array of a non-optional element is refused.
        var list = older
        list["l"] = .array([.integer(1), .null])
        let nullError = #expect(throws: ContentError.self) { try versioned(list, version: AppVersion("1.2")!) }
        #expect(nullError?.field == "fields.l[1]")
    }

    @Test("pizza: at_the_door reaches an app older than 1.2 as on_the_way, and an app of unknown version too")
    func standIn() throws {
        var fields = Self.pizza
        fields["status"] = .string("at_the_door")
        #expect(try contentState(fields, version: "999999")["status"] == .string("on_the_way"))
    }

    @Test("a required range missing is refused")
    func rangeRequired() {
        var fields = Self.pizza
        fields["estimatedDeliveryTime"] = nil
        let error = #expect(throws: ContentError.self) { try contentState(fields, version: "1.0") }
        #expect(error?.field == "fields.estimatedDeliveryTime")
    }
}
