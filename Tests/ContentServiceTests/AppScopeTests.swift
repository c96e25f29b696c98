import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// Two apps may use the same activity id: content-service keeps each app's activity apart, sends
/// each app's events to that app's token only, and refuses an event it cannot place.
@Suite("content-service: activity ids are scoped per app")
struct ContentAppScopeTests {
    static let food = AppTarget(bundleId: "com.example.food", environment: .production)
    static let other = AppTarget(bundleId: "com.example.other", environment: .sandbox)

    func table(_ apps: [(AppTarget, String, Int)]) -> PartitionTokens {
        let table = PartitionTokens.whole()
        for (app, user, seed) in apps {
            let record = TokenRecord(
                kind: .update, activityId: "order-42", userId: user, token: String(repeating: String(format: "%02x", seed), count: 32), app: app,
                attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: now,
                updatedAt: now)
            table.put(record, key: record.key!)
        }
        return table
    }

    func delivery(_ sequence: Int64, bundleId: String?) -> ActivityEvent {
        var event = event("DeliveryAttributes", sequence: sequence, ["orderId": .string("42"), "status": .string("preparing")])
        event.bundleId = bundleId
        return event
    }

    func prepared(_ engine: ContentEngine, _ event: ActivityEvent) throws -> ContentEngine.Prepared {
        guard case .send(let prepared) = try engine.prepare(event) else { throw ContentError(field: "-", problem: "ignored") }
        engine.commit(prepared)
        return prepared
    }

    @Test("an event naming its app goes to that app's token only; each app's activity has its own memory, sequence and request ids")
    func eachAppItsOwn() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: table([(Self.food, "alice", 1), (Self.other, "bob", 2)]), clock: ManualClock(now))
        let toFood = try prepared(engine, delivery(1, bundleId: "com.example.food"))
        let toOther = try prepared(engine, delivery(1, bundleId: "com.example.other"))
        #expect(toFood.activityKey == "com.example.food/order-42" && toOther.activityKey == "com.example.other/order-42")
        #expect(toFood.requests.map(\.app) == [Self.food] && toOther.requests.map(\.app) == [Self.other], "the token's app and environment")
        #expect(toFood.requests.map(\.key) == ["com.example.food/order-42"] && toOther.requests.map(\.key) == ["com.example.other/order-42"])
        #expect(Set(toFood.requests.map(\.requestId)).isDisjoint(with: toOther.requests.map(\.requestId)), "same event id, other app: other requests")
        #expect(engine.memory(of: "com.example.food/order-42")?.lastSequence == 1)
        #expect(engine.memory(of: "com.example.other/order-42")?.lastSequence == 1)
        // The same sequence again is a duplicate for that app only.
        guard case .ignore = try engine.prepare(delivery(1, bundleId: "com.example.food")) else { throw ContentError(field: "-", problem: "sent twice") }

        // An outcome names its app: it lands in that app's memory.
        let request = toOther.requests[0]
        engine.record(
            PushOutcome(requestId: request.requestId, activityId: "order-42", result: .failed, attempts: 1, completedAt: now, bundleId: "com.example.other"))
        #expect(engine.staleActivities().map(\.bundleId) == ["com.example.other"])
        #expect(engine.staleActivities().map(\.activityId) == ["order-42"])
    }

    @Test("an event without its app: the only app with a token for the id; refused (naming the apps) when several have one, with nothing sent")
    func eventsWithoutTheirApp() throws {
        let single = ContentEngine(assembler: try assembler(), tokens: table([(Self.other, "bob", 2)]), clock: ManualClock(now))
        #expect(try prepared(single, delivery(1, bundleId: nil)).requests.map(\.app) == [Self.other])

        let both = ContentEngine(assembler: try assembler(), tokens: table([(Self.food, "alice", 1), (Self.other, "bob", 2)]), clock: ManualClock(now))
        #expect { try both.prepare(delivery(1, bundleId: nil)) } throws: { error in
            let error = error as? ContentError
            return error?.field == "bundleId" && error?.problem.contains("com.example.food, com.example.other") == true
        }
        #expect(both.activityCount == 0, "nothing remembered, nothing sent")

        // No token anywhere: the template's app (as before activity ids were scoped).
        let none = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        #expect(try prepared(none, delivery(1, bundleId: nil)).activityKey == "com.example.food/order-42")
        // Named, without a token of that app: the template's app is another, so its environment is unknown.
        #expect { try none.prepare(delivery(2, bundleId: "com.example.other")) } throws: { ($0 as? ContentError)?.field == "activityId" }
    }

    @Test("an event without its app never goes to another app's token: an app remembered live with the id (a push-to-start) and another's token make it ambiguous; an ended token does not count")
    func rememberedAppCounts() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: table([(Self.food, "alice", 1)]), clock: ManualClock(now))
        // The ride app started order-42 remotely (its update token not registered yet).
        let target = ActivityEvent.PushToStartTarget(app: Self.other, deviceId: "device-1")
        var start = event("DeliveryAttributes", .start, sequence: 1, ["orderId": .string("42"), "status": .string("placed")], startTarget: target)
        start.attributes = ["orderId": .string("42"), "storeName": .string("Casa Lola")]
        #expect(try prepared(engine, start).activityKey == "com.example.other/order-42")
        #expect { try engine.prepare(delivery(2, bundleId: nil)) } throws: { ($0 as? ContentError)?.field == "bundleId" }
        // Named, it goes where it says, to the app (and environment) of its remote start, its token not registered yet.
        let update = try prepared(engine, delivery(2, bundleId: "com.example.other")).requests
        #expect(update.map(\.key) == ["com.example.other/order-42"] && update.map(\.app) == [Self.other])

        // Only a remembered live activity, no token: that app, not the template's.
        let remembered = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        _ = try prepared(remembered, start)
        #expect(try remembered.activityKey(of: delivery(2, bundleId: nil)) == "com.example.other/order-42")

        // An invalidated token of another app does not claim the id.
        let table = table([(Self.food, "alice", 1), (Self.other, "bob", 2)])
        var dead = TokenRecord(
            kind: .update, activityId: "order-42", userId: "alice", token: String(repeating: "01", count: 32), app: Self.food,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: now,
            updatedAt: now)
        dead.state = .invalidated
        dead.invalidation = .init(reason: .clientEnded, invalidatedAt: now)
        table.put(dead, key: dead.key!)
        let withDead = ContentEngine(assembler: try assembler(), tokens: table, clock: ManualClock(now))
        #expect(try withDead.activityKey(of: delivery(1, bundleId: nil)) == "com.example.other/order-42")
    }

    @Test("an outcome written before outcomes named their app lands in the only app remembered with the id, and in none when two are")
    func legacyOutcomes() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: table([(Self.food, "alice", 1), (Self.other, "bob", 2)]), clock: ManualClock(now))
        let food = try prepared(engine, delivery(1, bundleId: "com.example.food")).requests[0]
        _ = try prepared(engine, delivery(1, bundleId: "com.example.other"))
        engine.record(PushOutcome(requestId: food.requestId, activityId: "order-42", result: .failed, attempts: 1, completedAt: now))
        #expect(engine.staleActivities().isEmpty, "two apps remembered with the id: the old outcome is not guessed onto either")

        let lone = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let request = try prepared(lone, delivery(1, bundleId: nil)).requests[0]
        lone.record(PushOutcome(requestId: request.requestId, activityId: "order-42", result: .failed, attempts: 1, completedAt: now))
        #expect(lone.staleActivities().map(\.bundleId) == ["com.example.food"], "one app remembered with the id: the old outcome is its")
    }
}
