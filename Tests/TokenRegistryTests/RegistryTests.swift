import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry
import HTTPTypes
import IsletRuntime

@Suite("Registry rules")
struct RegistryTests {
    let clock = ManualClock()
    let publisher = RecordingPublisher()

    func makeRegistry() -> Registry {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        return registry
    }

    @Test("quotas: a user with as many live activities or push-to-start tokens as allowed gets 429 quotaExceeded for one more and nothing is written; re-registering one held, or ending one, is fine; other users are not affected")
    func quotas() async throws {
        let registry = Registry(
            table: TokenTable(), publisher: publisher, logger: quietLogger, quotas: .init(liveActivities: 2, pushToStart: 1), clock: clock)
        registry.markReady()
        _ = try await registry.registerActivityToken(user: "u", activityId: "a1", activityRequest(token: hexToken(1)))
        _ = try await registry.registerActivityToken(user: "u", activityId: "a2", activityRequest(token: hexToken(2)))
        let written = publisher.records.count
        let over = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "a3", activityRequest(token: hexToken(3)))
        }
        #expect(over?.status == .tooManyRequests && over?.code == .quotaExceeded, "\(String(describing: over))")
        #expect(publisher.records.count == written, "nothing written")
        #expect(try await registry.registerActivityToken(user: "u", activityId: "a2", activityRequest(token: hexToken(4))).change == .rotated)
        #expect(try await registry.registerActivityToken(user: "v", activityId: "b1", activityRequest(token: hexToken(5))).change == .registered)
        _ = try await registry.invalidateActivity(user: "u", activityId: "a1", reason: .clientEnded)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "a3", activityRequest(token: hexToken(3))).change == .registered)

        let body = RegisterPushToStartTokenRequest(token: hexToken(6), environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0")
        _ = try await registry.registerPushToStartToken(user: "u", bundleId: "com.example.ride", deviceId: "d1", attributesType: "RideAttributes", body)
        let overPTS = await #expect(throws: APIError.self) {
            try await registry.registerPushToStartToken(user: "u", bundleId: "com.example.ride", deviceId: "d2", attributesType: "RideAttributes", body)
        }
        #expect(overPTS?.code == .quotaExceeded)
    }

    @Test("the app's locale: made canonical (Apple's zh_Hans_CN is zh-Hans-CN), carried on the token record, kept when a re-registration does not say it, replaced when one does")
    func locale() async throws {
        let registry = makeRegistry()
        let key = MessageKey.activity(bundleId: "com.example.food", activityId: "a1")
        var body = activityRequest(token: hexToken(1))
        body.locale = "zh_hans_cn"
        #expect(try await registry.registerActivityToken(user: "u", activityId: "a1", body).change == .registered)
        #expect(publisher.records.last?.locale == "zh-Hans-CN")
        #expect(registry.table.record(forKey: key)?.locale == "zh-Hans-CN")
        body.locale = nil
        body.token = hexToken(2)
        _ = try await registry.registerActivityToken(user: "u", activityId: "a1", body)
        #expect(registry.table.record(forKey: key)?.locale == "zh-Hans-CN", "not said: kept")
        body.locale = "en-GB"
        _ = try await registry.registerActivityToken(user: "u", activityId: "a1", body)
        #expect(registry.table.record(forKey: key)?.locale == "en-GB")
        let written = publisher.records.count
        body.locale = "--"
        let refused = await #expect(throws: APIError.self) { try await registry.registerActivityToken(user: "u", activityId: "a1", body) }
        #expect(refused?.field == "locale")
        #expect(publisher.records.count == written, "nothing written")
        let pts = RegisterPushToStartTokenRequest(token: hexToken(6), environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0", locale: "zh-TW")
        _ = try await registry.registerPushToStartToken(user: "u", bundleId: "com.example.ride", deviceId: "d1", attributesType: "RideAttributes", pts)
        #expect(publisher.records.last?.locale == "zh-TW")
    }

    @Test("the retention sweep deletes (tombstones) records invalidated longer ago than the retention, keeps the others and the live ones, and leaves what Kafka refused for the next sweep")
    func retentionSweep() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "old", activityRequest(token: hexToken(1)))
        _ = try await registry.invalidateActivity(user: "u", activityId: "old", reason: .clientEnded)
        clock.advance(3 * 86_400)
        _ = try await registry.registerActivityToken(user: "u", activityId: "recent", activityRequest(token: hexToken(2)))
        _ = try await registry.invalidateActivity(user: "u", activityId: "recent", reason: .clientEnded)
        _ = try await registry.registerActivityToken(user: "u", activityId: "live", activityRequest(token: hexToken(3)))
        clock.advance(5 * 86_400)
        publisher.refuse(true)
        #expect(await registry.sweep(invalidatedFor: .seconds(7 * 86_400)) == 0, "Kafka refused: nothing deleted")
        #expect(registry.table.record(forKey: MessageKey.activity(bundleId: "com.example.food", activityId: "old")) != nil)
        publisher.refuse(false)
        #expect(await registry.sweep(invalidatedFor: .seconds(7 * 86_400)) == 1)
        #expect(publisher.tombstones == [MessageKey.activity(bundleId: "com.example.food", activityId: "old")])
        #expect(registry.table.record(forKey: MessageKey.activity(bundleId: "com.example.food", activityId: "old")) == nil)
        #expect(registry.table.record(forKey: MessageKey.activity(bundleId: "com.example.food", activityId: "recent")) != nil)
        #expect(registry.table.record(forKey: MessageKey.activity(bundleId: "com.example.food", activityId: "live"))?.state == .active)
        #expect(await registry.sweep(invalidatedFor: .seconds(7 * 86_400)) == 0, "nothing more to delete")
    }

    @Test("a device belongs to the user of its push-to-start registration, not to whoever names it in an activity registration; naming another user's device is 403")
    func deviceOwnership() async throws {
        let registry = makeRegistry()
        var squat = activityRequest(token: hexToken(1))
        squat.deviceId = "victims-device"
        squat.app = AppTarget(bundleId: "com.example.ride", environment: .production)
        _ = try await registry.registerActivityToken(user: "mallory", activityId: "m1", squat)
        let body = RegisterPushToStartTokenRequest(token: hexToken(2), environment: .production, frequentUpdatesEnabled: false, appVersion: "3.0")
        let claimed = try await registry.registerPushToStartToken(
            user: "victim", bundleId: "com.example.ride", deviceId: "victims-device", attributesType: "RideAttributes", body)
        #expect(claimed.change == .registered, "naming a device in an activity registration did not make it mallory's")
        var again = activityRequest(token: hexToken(3))
        again.deviceId = "victims-device"
        again.app = AppTarget(bundleId: "com.example.ride", environment: .production)
        let refused = await #expect(throws: APIError.self) { try await registry.registerActivityToken(user: "mallory", activityId: "m2", again) }
        #expect(refused?.status == .forbidden && refused?.field == "deviceId")
        #expect(try await registry.registerActivityToken(user: "victim", activityId: "v1", again).change == .registered)
    }

    @Test("registering writes one active record keyed by the activity; repeating it writes nothing")
    func registerIsIdempotent() async throws {
        let registry = makeRegistry()
        let first = try await registry.registerActivityToken(user: "u1", activityId: "order-42", activityRequest())
        #expect(first.change == .registered)
        #expect(first.token.state == .active)
        #expect(first.token.tokenFingerprint == TokenFingerprint.of(token: hexToken(1)))
        let again = try await registry.registerActivityToken(user: "u1", activityId: "order-42", activityRequest())
        #expect(again.change == .unchanged)
        #expect(publisher.records.count == 1)
        let record = try #require(publisher.records.first)
        #expect(record.key == "com.example.food/order-42")
        #expect(record.userId == "u1")
        #expect(record.token == hexToken(1))
        #expect(throws: Never.self) { try record.validate() }
    }

    @Test("the same token registered again moves its registration time on (confirmed): a 410 timestamped before that does not kill it, also one still in flight (issue 57); a repeat within a second writes nothing")
    func confirmation() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest())
        let registered = clock.date
        #expect(try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest()).change == .unchanged)
        #expect(publisher.records.count == 1)
        clock.advance(30)
        let confirmed = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest())
        #expect(confirmed.change == .confirmed && confirmed.token.registeredAt == clock.date)
        #expect(publisher.records.count == 2)
        // APNs's 410 from between the first registration and this one, read now (it was in flight
        // when the app registered again): not believed.
        let verdict = registered.addingTimeInterval(10)
        let outcome = PushOutcome(
            requestId: "r1", activityId: "a1", result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered", timestamp: verdict), attempts: 1,
            tokenFingerprint: TokenFingerprint.of(token: hexToken(1)), completedAt: clock.date, bundleId: "com.example.food")
        #expect(try await registry.handle(outcome) == .ignore("the token was registered again after APNs's verdict"))
        #expect(registry.table.record(forKey: "com.example.food/a1")?.state == .active)
        // The same token with another app version later: updated, and confirmed too.
        clock.advance(90)
        let updated = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest(version: "5.3.0"))
        #expect(updated.change == .updated && updated.token.registeredAt == clock.date)
    }

    @Test("two instances: an invalidation one wrote from a table that had not read the other's confirmation of the token is undone by its writer once it reads it (issue 57: a re-registration silently undone)")
    func laggingInstanceRepairs() async throws {
        let a = makeRegistry(), b = makeRegistry()  // one topic (the publisher), two tables
        let key = "com.example.food/a1"
        _ = try await a.registerActivityToken(user: "u1", activityId: "a1", activityRequest())  // offset 0
        let registered = clock.date
        b.table.apply(publisher.records[0], key: key, at: .init(partition: 0, offset: 0))
        clock.advance(30)
        #expect(try await a.registerActivityToken(user: "u1", activityId: "a1", activityRequest()).change == .confirmed)  // offset 1, unread by b
        // APNs's 410, timestamped between the two registrations, judged by b on its stale record.
        let outcome = PushOutcome(
            requestId: "r1", activityId: "a1", result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered", timestamp: registered.addingTimeInterval(10)),
            attempts: 1, tokenFingerprint: TokenFingerprint.of(token: hexToken(1)), completedAt: clock.date, bundleId: "com.example.food")
        guard case .invalidate = try await b.handle(outcome) else {
            Issue.record("b had not read the confirmation: it invalidates")
            return
        }
        #expect(publisher.records.map(\.state) == [.active, .active, .invalidated])
        // b's reader reaches offset 1 (noted: before its invalidation), then its invalidation: the
        // last record before it is a registration the verdict does not kill.
        #expect(!b.table.apply(publisher.records[1], key: key, at: .init(partition: 0, offset: 1)), "older than the invalidation: not taken")
        #expect(b.readBehind(publisher.records[1], key: key, at: .init(partition: 0, offset: 1)) == nil, "noted; decided at the invalidation")
        await b.readBehind(publisher.records[2], key: key, at: .init(partition: 0, offset: 2))?.value
        #expect(publisher.records.map(\.state) == [.active, .active, .invalidated, .active], "written again after the invalidation")
        #expect(publisher.records.last?.registeredAt == publisher.records[1].registeredAt)
        #expect(b.table.record(forKey: key)?.state == .active)
        // Read again (a restart), nothing more is written.
        #expect(b.readBehind(publisher.records[2], key: key, at: .init(partition: 0, offset: 2)) == nil)
    }

    @Test("two instances: what stands before the invalidation on the topic decides — an end, or a registration the verdict kills, is not undone; a rotation is written again")
    func laggingInstanceRepairsOnlyWhatTheVerdictSpares() async throws {
        let key = "com.example.food/a1"
        func verdict(at date: Date) -> PushOutcome {
            PushOutcome(
                requestId: "r1", activityId: "a1", result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered", timestamp: date),
                attempts: 1, tokenFingerprint: TokenFingerprint.of(token: hexToken(1)), completedAt: clock.date, bundleId: "com.example.food")
        }
        // a registers, then a confirms and the app ends the activity on a (b reads neither); b invalidates.
        let a = makeRegistry(), b = makeRegistry()
        _ = try await a.registerActivityToken(user: "u1", activityId: "a1", activityRequest())  // 0
        let registered = clock.date
        b.table.apply(publisher.records[0], key: key, at: .init(partition: 0, offset: 0))
        clock.advance(30)
        _ = try await a.registerActivityToken(user: "u1", activityId: "a1", activityRequest())  // 1: confirmed
        _ = try await a.invalidateActivity(user: "u1", activityId: "a1", reason: .clientEnded)  // 2: ended
        _ = try await b.handle(verdict(at: registered.addingTimeInterval(10)))  // 3: b's invalidation
        for offset in 1...3 { b.readBehind(publisher.records[offset], key: key, at: .init(partition: 0, offset: Int64(offset))) }
        #expect(publisher.records.count == 4, "the app's end stands: nothing written again")

        // a rotates the token (b reads it late); b's invalidation of the old token undid the rotation.
        let c = makeRegistry(), d = makeRegistry()
        let key2 = "com.example.food/a2"
        _ = try await c.registerActivityToken(user: "u1", activityId: "a2", activityRequest())  // 4
        d.table.apply(publisher.records[4], key: key2, at: .init(partition: 0, offset: 4))
        clock.advance(30)
        #expect(try await c.registerActivityToken(user: "u1", activityId: "a2", activityRequest(token: hexToken(2))).change == .rotated)  // 5
        var old = verdict(at: clock.date)
        old.activityId = "a2"
        _ = try await d.handle(old)  // 6: d invalidates the old token's record
        d.readBehind(publisher.records[5], key: key2, at: .init(partition: 0, offset: 5))
        await d.readBehind(publisher.records[6], key: key2, at: .init(partition: 0, offset: 6))?.value
        #expect(publisher.records.last?.token == hexToken(2) && publisher.records.last?.state == .active, "the rotation is written again")

        // A registration from before APNs's verdict is killed by it: not written again.
        let e = makeRegistry(), f = makeRegistry()
        let key3 = "com.example.food/a3"
        _ = try await e.registerActivityToken(user: "u1", activityId: "a3", activityRequest())  // 8
        let before = publisher.records.count
        f.table.apply(publisher.records[before - 1], key: key3, at: .init(partition: 0, offset: Int64(before - 1)))
        clock.advance(30)
        var late = verdict(at: clock.date)
        late.activityId = "a3"
        _ = try await f.handle(late)
        #expect(f.readBehind(publisher.records[before], key: key3, at: .init(partition: 0, offset: Int64(before))) == nil)
        #expect(publisher.records.count == before + 1)
    }

    @Test("a new token rotates: the record carries it with a new registration time; uppercase hex is the same token")
    func rotation() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest())
        clock.advance(60)
        let rotated = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest(token: hexToken(2)))
        #expect(rotated.change == .rotated)
        #expect(rotated.token.registeredAt == clock.date)
        let same = try await registry.registerActivityToken(user: "u1", activityId: "a1", activityRequest(token: hexToken(2).uppercased()))
        #expect(same.change == .unchanged)
        #expect(publisher.records.map(\.token) == [hexToken(1), hexToken(2)])
    }

    @Test("another user cannot register, read, invalidate or change someone's activity, and nothing is written")
    func ownership() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "a1", activityRequest())
        let taken = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "a1", activityRequest(token: hexToken(9)))
        }
        #expect(taken?.status == .forbidden)
        #expect(throws: APIError.notFound) { try registry.activity(user: "mallory", activityId: "a1") }
        await #expect(throws: APIError.notFound) { try await registry.invalidateActivity(user: "mallory", activityId: "a1", reason: .userDismissed) }
        await #expect(throws: APIError.notFound) { try await registry.setFrequentUpdates(user: "mallory", activityId: "a1", enabled: true) }
        #expect(publisher.records.count == 1)
    }

    @Test("an activity the app ended cannot be registered again; one APNs invalidated can")
    func endedVersusDead() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "ended", activityRequest())
        let ended = try await registry.invalidateActivity(user: "u", activityId: "ended", reason: .clientEnded)
        #expect(ended.change == .invalidated)
        #expect(ended.token.invalidation?.reason == .clientEnded)
        let again = try await registry.invalidateActivity(user: "u", activityId: "ended", reason: .clientEnded)
        #expect(again.change == .unchanged)
        let refused = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "ended", activityRequest(token: hexToken(3)))
        }
        #expect(refused?.status == .conflict)

        _ = try await registry.registerActivityToken(user: "u", activityId: "dead", activityRequest())
        clock.advance(10)
        try await registry.handle(outcome(for: "dead", token: hexToken(1), status: 410, reason: "Unregistered", timestamp: clock.date))
        #expect(registry.table.record(forKey: "com.example.food/dead")?.state == .invalidated)
        clock.advance(10)
        let revived = try await registry.registerActivityToken(user: "u", activityId: "dead", activityRequest())
        #expect(revived.change == .reactivated)
        #expect(revived.token.state == .active)
        #expect(revived.token.invalidation == nil)
    }

    @Test("the frequent-updates flag follows the app's reports")
    func frequentUpdates() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "a", activityRequest(frequent: true))
        let off = try await registry.setFrequentUpdates(user: "u", activityId: "a", enabled: false)
        #expect(off.change == .updated)
        #expect(off.token.frequentUpdatesEnabled == false)
        #expect(try await registry.setFrequentUpdates(user: "u", activityId: "a", enabled: false).change == .unchanged)
        #expect(publisher.records.map(\.frequentUpdatesEnabled) == [true, false])
    }

    @Test("push-to-start tokens are keyed by app, device and attributes type; a device belongs to its first user")
    func pushToStart() async throws {
        let registry = makeRegistry()
        let body = RegisterPushToStartTokenRequest(token: hexToken(5), environment: .sandbox, frequentUpdatesEnabled: false, appVersion: "17.2")
        let result = try await registry.registerPushToStartToken(
            user: "u", bundleId: "com.example.ride", deviceId: "device-1", attributesType: "RideAttributes", body)
        #expect(result.change == .registered)
        #expect(publisher.records.last?.key == "pts:com.example.ride:device-1:RideAttributes")
        #expect(publisher.records.last?.kind == .pushToStart)
        let other = await #expect(throws: APIError.self) {
            try await registry.registerPushToStartToken(
                user: "v", bundleId: "com.example.ride", deviceId: "device-1", attributesType: "OtherAttributes", body)
        }
        #expect(other?.status == .forbidden)
        let view = try registry.pushToStart(user: "u", bundleId: "com.example.ride", deviceId: "device-1", attributesType: "RideAttributes")
        #expect(view.app.environment == .sandbox)
    }

    @Test("when Kafka does not acknowledge, the answer is 503 and the table is unchanged")
    func kafkaDown() async throws {
        let registry = makeRegistry()
        publisher.refuse(true)
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "a", activityRequest())
        }
        #expect(error?.status == .serviceUnavailable)
        #expect(registry.table.record(forKey: "com.example.food/a") == nil)
        publisher.refuse(false)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "a", activityRequest()).change == .registered)
    }

    @Test("until the table is rebuilt, every call is 503")
    func notReady() async throws {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger)
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "a", activityRequest())
        }
        #expect(error?.status == .serviceUnavailable)
        #expect(throws: APIError.self) { try registry.activity(user: "u", activityId: "a") }
        #expect(publisher.records.isEmpty)
    }

    @Test("concurrent registrations of one activity are decided one at a time: one registers, the rest rotate or change nothing")
    func concurrentWrites() async throws {
        let registry = makeRegistry()
        let changes = try await withThrowingTaskGroup(of: Change.self) { group in
            for i in 0..<20 {
                group.addTask { try await registry.registerActivityToken(user: "u", activityId: "a", activityRequest(token: hexToken(i % 2))).change }
            }
            return try await group.reduce(into: [Change]()) { $0.append($1) }
        }
        #expect(changes.filter { $0 == .registered }.count == 1)
        // Every write was decided against the state the previous one left.
        let tokens = publisher.records.map(\.token)
        #expect(zip(tokens, tokens.dropFirst()).allSatisfy { $0 != $1 })
    }

    func outcome(
        for key: String, token: String, status: Int, reason: String, timestamp: Date? = nil, completedAt: Date? = nil
    ) -> PushOutcome {
        PushOutcome(
            requestId: "r-\(UUID())", activityId: key, result: .tokenInvalid,
            apns: .init(status: status, reason: reason, apnsId: nil, timestamp: timestamp), priorityUsed: 10, attempts: 1,
            tokenFingerprint: TokenFingerprint.of(token: token), completedAt: completedAt ?? clock.date)
    }
}
