import Foundation
import IsletMessages
import Testing
@testable import ContentService

@Suite("A template sent by broadcast (iOS 18)")
struct BroadcastTemplateTests {
    static let scores = AppTarget(bundleId: "com.example.scores", environment: .production)

    @Test("every request of a broadcast type goes to the activity's channel with the template's storage policy, the first (the match started) as an update; other types' requests go to tokens")
    func requestsAreBroadcasts() throws {
        let assembler = try assembler()
        #expect(assembler.templates["MatchAttributes"]?.broadcastStoragePolicy == 0)
        var memory = ActivityMemory()
        let fields: [String: JSONValue] = ["matchId": .string("m-1"), "homeTeam": .string("Lions"), "awayTeam": .string("Bears"), "minute": .integer(1)]
        var requests: [PushRequest] = []
        for (sequence, kind) in [(Int64(1), ActivityEventKind.start), (2, .update), (3, .end)] {
            requests += try assembler.assemble(
                event("MatchAttributes", kind, sequence: sequence, at: Double(sequence), fields), app: Self.scores, appVersion: ContentEngine.newest,
                memory: &memory, now: now.addingTimeInterval(Double(sequence))
            ).requests
        }
        #expect(requests.map(\.event) == [.update, .update, .end])
        #expect(requests.allSatisfy { $0.channelStoragePolicy == 0 && $0.activityId == "order-42" && $0.pushToStartKey == nil })
        for request in requests { try request.validate() }

        var delivery = ActivityMemory()
        let order = try assembler.assemble(
            event("DeliveryAttributes", sequence: 1, ["orderId": .string("42"), "storeName": .string("Casa Lola"), "status": .string("preparing")]), app: app,
            appVersion: AppVersion("3.0")!, memory: &delivery, now: now)
        #expect(order.requests.allSatisfy { $0.channelStoragePolicy == nil })
    }
}
