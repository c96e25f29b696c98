import Foundation
import IsletLinks
import IsletMessages
import Testing
@testable import ContentService

/// What one event turned into, as kept in a golden file.
struct GoldenStep: Codable, Equatable {
    var event: String
    var requests: [GoldenRequest]
}

struct GoldenRequest: Codable, Equatable {
    var event: String
    var priority: Int
    var alerting: Bool
    var supersedable: Bool
    var bytes: Int
    var aps: JSONValue
}

@Suite("Golden payloads: what a phone decodes, for each example type")
struct GoldenPayloadTests {
    static let device = ActivityEvent.PushToStartTarget(app: app, deviceId: "device-1")

    static let scenarios: [(String, [ActivityEvent])] = [
        (
            "DeliveryAttributes",
            [
                event("DeliveryAttributes", .start, sequence: 1, at: 0, ["status": .string("placed"), "orderId": .string("42")],
                      startTarget: device, attributes: ["orderId": .string("42"), "storeName": .string("Noodle Bar")]),
                event("DeliveryAttributes", sequence: 2, urgency: .routine, at: 60, ["status": .string("preparing"), "orderId": .string("42"), "storeName": .string("Noodle Bar")]),
                event("DeliveryAttributes", sequence: 3, at: 600, ["status": .string("courier_assigned"), "orderId": .string("42"),
                    "courier": .object(["name": .string("Ana"), "photoUrl": .string("https://img.example.com/ana.jpg")])]),
                event("DeliveryAttributes", sequence: 4, at: 900, ["status": .string("out_for_delivery"), "orderId": .string("42"), "progress": .integer(40),
                    "etaAt": .string("2026-11-18T08:15:00.000Z"), "courier": .object(["name": .string("Ana")])]),
                event("DeliveryAttributes", sequence: 5, urgency: .routine, at: 1_200, ["status": .string("out_for_delivery"), "orderId": .string("42"), "progress": .integer(80),
                    "etaAt": .string("2026-11-18T08:12:00.000Z"), "courier": .object(["name": .string("Ana")])]),
                event("DeliveryAttributes", .end, sequence: 6, at: 1_500, ["status": .string("delivered"), "orderId": .string("42"), "progress": .integer(100),
                    "courier": .object(["name": .string("Ana")])]),
            ]
        ),
        (
            "RideAttributes",
            [
                event("RideAttributes", sequence: 1, urgency: .routine, at: 0, ["phase": .string("matching"), "rideId": .string("r-7")]),
                event("RideAttributes", sequence: 2, at: 30, ["phase": .string("en_route"), "rideId": .string("r-7"), "pickupAt": .integer(1_795_000_300),
                    "driver": .object(["name": .string("Sam"), "vehicle": .string("Blue Prius"), "plate": .string("7XYZ123")])]),
                event("RideAttributes", sequence: 3, urgency: .critical, at: 300, ["phase": .string("arriving"), "rideId": .string("r-7"), "progress": .integer(100),
                    "driver": .object(["name": .string("Sam"), "vehicle": .string("Blue Prius"), "plate": .string("7XYZ123")])]),
                event("RideAttributes", .end, sequence: 4, at: 1_800, ["phase": .string("dropped_off"), "rideId": .string("r-7"),
                    "driver": .object(["name": .string("Sam")])]),
            ]
        ),
        (
            "MatchAttributes",
            [
                event("MatchAttributes", sequence: 1, urgency: .routine, at: 0, ["matchId": .string("m-1"), "homeTeam": .string("Lions"), "awayTeam": .string("Bears"), "minute": .integer(12)]),
                event("MatchAttributes", sequence: 2, at: 60, ["period": .string("goal"), "matchId": .string("m-1"), "homeTeam": .string("Lions"), "awayTeam": .string("Bears"),
                    "homeScore": .integer(1), "minute": .integer(13), "lastEvent": .string("Goal by Ortiz")]),
                event("MatchAttributes", sequence: 3, urgency: .routine, at: 120, ["period": .string("live"), "matchId": .string("m-1"), "homeTeam": .string("Lions"),
                    "awayTeam": .string("Bears"), "homeScore": .integer(1), "minute": .integer(14)]),
                event("MatchAttributes", .end, sequence: 4, at: 5_400, ["period": .string("full_time"), "matchId": .string("m-1"), "homeTeam": .string("Lions"),
                    "awayTeam": .string("Bears"), "homeScore": .integer(1), "awayScore": .integer(1), "minute": .integer(90)]),
            ]
        ),
        (
            "PizzaDeliveryAttributes",
            [
                event("PizzaDeliveryAttributes", .start, sequence: 1, at: 0, ["status": .string("ordered"), "orderId": .string("p-1"),
                    "estimatedDeliveryTime": .array([.string("2026-11-18T08:00:00Z"), .string("2026-11-18T08:30:00Z")])],
                      startTarget: device, attributes: ["numberOfPizzas": .integer(2), "totalAmount": .string("$24")]),
                event("PizzaDeliveryAttributes", sequence: 2, urgency: .routine, at: 300, ["status": .string("baking"), "orderId": .string("p-1"),
                    "estimatedDeliveryTime": .object(["start": .integer(1_794_988_800), "end": .string("2026-11-18T08:30:00Z")]),
                    "toppings": .array([.string("mozzarella"), .string("basil")])]),
                event("PizzaDeliveryAttributes", sequence: 3, at: 900, ["status": .string("on_the_way"), "orderId": .string("p-1"),
                    "estimatedDeliveryTime": .array([.string("2026-11-18T08:10:00Z"), .string("2026-11-18T08:25:00Z")]),
                    "driver": .object(["name": .string("Tim"), "vehicle": .string("bike"), "rating": .number(4.8)])]),
                // A case app 1.1 does not decode: on_the_way (its olderApps case) for it.
                event("PizzaDeliveryAttributes", sequence: 4, urgency: .critical, at: 1_400, ["status": .string("at_the_door"), "orderId": .string("p-1"),
                    "estimatedDeliveryTime": .array([.string("2026-11-18T08:22:00Z"), .string("2026-11-18T08:24:00Z")]),
                    "driver": .object(["name": .string("Tim"), "vehicle": .string("bike")])]),
                event("PizzaDeliveryAttributes", .end, sequence: 5, at: 1_600, ["status": .string("delivered"), "orderId": .string("p-1"),
                    "estimatedDeliveryTime": .array([.string("2026-11-18T08:22:00Z"), .string("2026-11-18T08:24:00Z")])]),
            ]
        ),
    ]

    /// MatchAttributes goes by broadcast: one payload for every phone, in no language of its own.
    @Test(
        "each transition of each example type gives the golden payloads, in the default language and in Chinese (an app registered with zh-Hans-CN), for the newest app and for older ones",
        arguments: [
            ("DeliveryAttributes", "", "3.0"), ("DeliveryAttributes", "zh-Hans-CN", "3.0"), ("RideAttributes", "", "3.0"), ("RideAttributes", "zh-Hans-CN", "3.0"),
            ("MatchAttributes", "", "3.0"), ("PizzaDeliveryAttributes", "", "3.0"), ("PizzaDeliveryAttributes", "", "1.1"), ("PizzaDeliveryAttributes", "", "1.0"),
        ])
    func golden(type: String, locale: String, version: String) throws {
        let assembler = try assembler()
        var memory = ActivityMemory()
        var steps: [GoldenStep] = []
        for event in Self.scenarios.first(where: { $0.0 == type })!.1 {
            let result = try assembler.assemble(
                event, app: app, appVersion: AppVersion(version)!, locale: locale.isEmpty ? nil : locale, memory: &memory,
                now: event.occurredAt.addingTimeInterval(1))
            steps.append(
                GoldenStep(
                    event: "\(event.kind.rawValue) \(event.fields[assembler.templates[type]!.stateField]?.stringValue ?? "-")",
                    requests: try result.requests.map {
                        GoldenRequest(
                            event: $0.event.rawValue, priority: $0.priority, alerting: $0.alerting, supersedable: $0.supersedable,
                            bytes: $0.payload.utf8.count, aps: .object(try aps($0)))
                    }))
            #expect(result.requests.allSatisfy { $0.payload.utf8.count <= 4_096 })
        }
        let path = "\(goldenDirectory)/\(type)\(locale.isEmpty ? "" : "." + locale)\(version == "3.0" ? "" : ".app-" + version).json"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        if ProcessInfo.processInfo.environment["ISLET_UPDATE_GOLDEN"] == "1" {
            try encoder.encode(steps).write(to: URL(fileURLWithPath: path))
        }
        let golden = try JSONDecoder().decode([GoldenStep].self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(steps == golden, "run with ISLET_UPDATE_GOLDEN=1 to rewrite \(path) after reviewing the change")
    }
}
