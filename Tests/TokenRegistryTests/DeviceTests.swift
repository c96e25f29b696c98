import Foundation
import HTTPTypes
import IsletKafka
import IsletRuntime
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry

/// Issue 60 item 4: one update token per (activity, device).
@Suite("An activity on several devices")
struct DeviceTests {
    let clock = ManualClock()
    let publisher = RecordingPublisher()

    func makeRegistry(liveActivities: Int = 0, devices: Int = 4) -> Registry {
        let registry = Registry(
            table: TokenTable(), publisher: publisher, logger: quietLogger,
            quotas: .init(liveActivities: liveActivities, pushToStart: 0, devicesPerActivity: devices), clock: clock)
        registry.markReady()
        return registry
    }

    func on(_ deviceId: String?, token: Int, version: String = "5.2.0") -> RegisterActivityTokenRequest {
        var request = activityRequest(token: hexToken(token), version: version)
        request.deviceId = deviceId
        return request
    }

    static let own = "com.example.food/order-7"
    static let pad = "com.example.food/order-7/ipad"

    @Test("a second device's registration gets its own record beside the first device's (nothing rotated away); each device rotates its own; the lookup lists the devices; the quota counts the activity once")
    func twoDevices() async throws {
        let registry = makeRegistry(liveActivities: 1)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1)).change == .registered)
        let second = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        #expect(second.change == .registered)
        let written = try #require(publisher.records.last)
        #expect(written.key == Self.pad && written.deviceKeyed == true && written.deviceId == "ipad")
        #expect(throws: Never.self) { try written.validate() }
        #expect(registry.table.record(forKey: Self.own)?.token == hexToken(1), "the first device's token is not rotated away")

        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 3)).change == .rotated)
        #expect(registry.table.record(forKey: Self.pad)?.token == hexToken(3))
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 4)).change == .rotated)
        #expect(registry.table.record(forKey: Self.own)?.token == hexToken(4))
        #expect(registry.table.record(forKey: Self.pad)?.token == hexToken(3))

        let view = try registry.activity(user: "u", activityId: "order-7")
        #expect(view.deviceId == "phone")
        #expect(view.devices?.map(\.deviceId) == ["ipad"])
        #expect(registry.table.keys(forActivity: "order-7") == [Self.own], "an activity id still names one activity")
        #expect(registry.table.activeCount(ofUser: "u", kind: .update) == 1)
        #expect(registry.table.activities(ofUser: "u", in: [.active], limit: 10).count == 1)
        // A second activity is over the quota of one; the second device of the first was not.
        let over = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "order-8", on("phone", token: 5))
        }
        #expect(over?.code == .quotaExceeded)
    }

    @Test("an app that names no device, or named none at first, keeps today's rotation of the one token")
    func noDeviceIds() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on(nil, token: 1))
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on(nil, token: 2)).change == .rotated)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 3)).change == .rotated)
        #expect(publisher.records.allSatisfy { $0.key == Self.own })
        // Now it names one: the same device rotates, another one gets its own record.
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 4)).change == .rotated)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 5)).change == .registered)
        #expect(publisher.records.last?.key == "com.example.food/order-7/phone")
    }

    @Test("another user cannot add a device to someone's activity (403, nothing written), nor read, end or change a device's record")
    func otherUsers() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        let written = publisher.records.count
        let refused = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-7", on("mallorys-pad", token: 3))
        }
        #expect(refused?.status == .forbidden)
        let pad = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-7", on("ipad", token: 3))
        }
        #expect(pad?.status == .forbidden)
        for attempt in [
            { () async throws -> Void in _ = try await registry.invalidateActivity(user: "mallory", activityId: "order-7", deviceId: "ipad", reason: .userDismissed) },
            { () async throws -> Void in _ = try await registry.setFrequentUpdates(user: "mallory", activityId: "order-7", deviceId: "ipad", enabled: true) },
            { () async throws -> Void in _ = try registry.activity(user: "mallory", activityId: "order-7") },
        ] {
            let error = await #expect(throws: APIError.self) { try await attempt() }
            #expect(error?.status == .notFound)
        }
        #expect(publisher.records.count == written)
    }

    @Test("a device ends its own record only: the app's end on the iPad, and APNs's 410 for the phone's token, leave the other device's token active; a 410'd device registers again")
    func endsPerDevice() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("watch", token: 3))
        #expect(try await registry.invalidateActivity(user: "u", activityId: "order-7", deviceId: "ipad", reason: .userDismissed).change == .invalidated)
        #expect(registry.table.record(forKey: Self.pad)?.state == .invalidated)
        #expect(registry.table.record(forKey: Self.own)?.state == .active)
        // The iPad's end is final for the iPad.
        let again = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 4))
        }
        #expect(again?.status == .conflict)

        // APNs's 410 for a copy sent to the watch names its device: the watch's record only.
        clock.advance(by: .seconds(5))
        let watch = "com.example.food/order-7/watch"
        let dead = PushOutcome(
            requestId: UUID().uuidString, activityId: "order-7", result: .tokenInvalid,
            apns: .init(status: 410, reason: "Unregistered", timestamp: clock.date), attempts: 1, tokenFingerprint: TokenFingerprint.of(token: hexToken(3)),
            completedAt: clock.date, bundleId: "com.example.food", deviceId: "watch")
        #expect(dead.key == watch)
        #expect(try await registry.handle(dead) == .invalidate(.apnsUnregistered, since: clock.date))
        #expect(registry.table.record(forKey: watch)?.state == .invalidated)
        #expect(registry.table.record(forKey: Self.own)?.state == .active, "the phone's token is not touched")
        clock.advance(by: .seconds(5))
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("watch", token: 5)).change == .reactivated)
    }

    @Test("the backend's end (or Islet's) ends every device; a device that registers after it is refused (409)")
    func backendEndsEveryDevice() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        _ = try await registry.invalidateEverywhere(Self.own, reason: .backendEnded)
        #expect(registry.table.record(forKey: Self.own)?.state == .invalidated)
        #expect(registry.table.record(forKey: Self.pad)?.state == .invalidated)
        let late = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "order-7", on("watch", token: 3))
        }
        #expect(late?.status == .conflict)
        // The phone's app ending its own activity is not the backend's end: another device may still register.
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-9", on("phone", token: 4))
        _ = try await registry.invalidateActivity(user: "u", activityId: "order-9", deviceId: "phone", reason: .userDismissed)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-9", on("ipad", token: 5)).change == .registered)
    }

    @Test("the frequent-updates flag of one device changes that device's record")
    func frequentUpdatesPerDevice() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        #expect(try await registry.setFrequentUpdates(user: "u", activityId: "order-7", deviceId: "ipad", enabled: true).change == .updated)
        #expect(registry.table.record(forKey: Self.pad)?.frequentUpdatesEnabled == true)
        #expect(registry.table.record(forKey: Self.own)?.frequentUpdatesEnabled == false)
    }

    @Test("the records of two devices registered at once on one instance: the first becomes the activity's own, the second its device's (never a rotation of one by the other)")
    func concurrentFirstRegistrations() async throws {
        for _ in 0..<20 {
            let registry = makeRegistry()
            async let a = registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
            async let b = registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
            let changes = try await [a.change, b.change]
            #expect(changes == [.registered, .registered])
            let own = try #require(registry.table.record(forKey: Self.own))
            let other = own.deviceId == "phone" ? "ipad" : "phone"
            #expect(registry.table.record(forKey: "com.example.food/order-7/\(other)")?.state == .active)
        }
    }
    @Test("off by default (ISLET_QUOTA_DEVICES_PER_ACTIVITY=1): a second device's registration rotates the one token, as before devices were kept apart")
    func offByDefault() async throws {
        let registry = makeRegistry(devices: 1)
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2)).change == .rotated)
        #expect(publisher.records.allSatisfy { $0.key == Self.own })
    }

    @Test("at most ISLET_QUOTA_DEVICES_PER_ACTIVITY devices follow one activity (429, nothing written); a device that ended frees its place")
    func devicesPerActivity() async throws {
        let registry = makeRegistry(devices: 3)
        for (index, device) in ["phone", "ipad", "watch"].enumerated() {
            #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on(device, token: index + 1)).change == .registered)
        }
        let written = publisher.records.count
        let over = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "order-7", on("mac", token: 9))
        }
        #expect(over?.status == .tooManyRequests && over?.field == "deviceId")
        #expect(publisher.records.count == written)
        _ = try await registry.invalidateActivity(user: "u", activityId: "order-7", deviceId: "watch", reason: .userDismissed)
        #expect(try await registry.registerActivityToken(user: "u", activityId: "order-7", on("mac", token: 9)).change == .registered)
    }

    @Test("one phone, one record: a token the activity already holds, registered under another device id (an app whose id is not stable), goes to the record that holds it, never to a second one")
    func sameTokenOtherDeviceId() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone-again", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad-again", token: 2))
        #expect(Set(publisher.records.compactMap(\.key)) == [Self.own, Self.pad])
        #expect(registry.table.deviceKeys(ofActivity: Self.own) == [Self.pad])
    }

    @Test("with several devices, ending or switching frequent updates without naming the device is 409 (which one?), and nothing is written")
    func nameTheDevice() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        let written = publisher.records.count
        let end = await #expect(throws: APIError.self) { try await registry.invalidateActivity(user: "u", activityId: "order-7", reason: .userDismissed) }
        #expect(end?.status == .conflict && end?.field == "deviceId")
        let toggle = await #expect(throws: APIError.self) { try await registry.setFrequentUpdates(user: "u", activityId: "order-7", enabled: true) }
        #expect(toggle?.status == .conflict)
        #expect(publisher.records.count == written)
    }

    @Test("the backend's end after the first device's app ended the activity there still ends it everywhere: a new device is refused")
    func backendEndAfterTheAppsEnd() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        _ = try await registry.invalidateActivity(user: "u", activityId: "order-7", deviceId: "phone", reason: .userDismissed)
        #expect(try await registry.invalidateEverywhere(Self.own, reason: .clientEnded).change == .updated)
        #expect(registry.table.record(forKey: Self.own)?.invalidation?.everyDevice == true)
        #expect(registry.table.record(forKey: Self.own)?.invalidation?.reason == .userDismissed, "the first device's reason stays")
        #expect(registry.table.record(forKey: Self.pad)?.state == .invalidated)
        let late = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "u", activityId: "order-7", on("watch", token: 3))
        }
        #expect(late?.status == .conflict)
        #expect(try await registry.invalidateEverywhere(Self.own, reason: .clientEnded).change == .unchanged)
    }

    @Test("the retention sweep keeps an activity's own record while another device's is active (it says whose the activity is); without it, another user's registration is refused")
    func ownRecordKeptForItsDevices() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1))
        _ = try await registry.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2))
        _ = try await registry.invalidateActivity(user: "u", activityId: "order-7", deviceId: "phone", reason: .userDismissed)
        clock.advance(by: .seconds(3_600))
        #expect(!registry.table.keys(invalidatedBefore: clock.date).contains(Self.own))
        // Were it gone (deleted by an older sweep), the iPad's record still says whose the activity is.
        registry.table.remove(key: Self.own, at: nil)
        let refused = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-7", on("mallorys-phone", token: 3))
        }
        #expect(refused?.status == .forbidden)
    }
    @Test("two instances: the iPad registers through one before it read the iPhone's registration through the other, and writes the activity's own record over it; reading the iPhone's behind its own, its writer writes the iPhone's again as that device's record (once)")
    func twoInstancesRace() async throws {
        let a = makeRegistry(), b = makeRegistry()  // one topic (the publisher), two tables
        #expect(try await a.registerActivityToken(user: "u", activityId: "order-7", on("phone", token: 1)).change == .registered)  // offset 0, unread by b
        #expect(try await b.registerActivityToken(user: "u", activityId: "order-7", on("ipad", token: 2)).change == .registered)  // offset 1, over it
        #expect(publisher.records.map(\.key) == [Self.own, Self.own])
        // b's reader reaches the phone's registration, behind its own (noted), then its own (decided).
        #expect(!b.table.apply(publisher.records[0], key: Self.own, at: .init(partition: 0, offset: 0)))
        #expect(b.readBehindRegistration(publisher.records[0], key: Self.own, at: .init(partition: 0, offset: 0)) == nil)
        #expect(publisher.records.count == 2)
        #expect(!b.table.apply(publisher.records[1], key: Self.own, at: .init(partition: 0, offset: 1)))
        await b.readBehindRegistration(publisher.records[1], key: Self.own, at: .init(partition: 0, offset: 1))?.value
        let phone = "com.example.food/order-7/phone"
        #expect(publisher.records.map(\.key) == [Self.own, Self.own, phone])
        let repaired = try #require(publisher.records.last)
        #expect(repaired.deviceKeyed == true && repaired.token == hexToken(1) && repaired.state == .active)
        #expect(throws: Never.self) { try repaired.validate() }
        // Read again (a restart of the reader), or by a's reader (not its registration): nothing more.
        #expect(b.readBehindRegistration(publisher.records[1], key: Self.own, at: .init(partition: 0, offset: 1)) == nil)
        #expect(a.readBehindRegistration(publisher.records[0], key: Self.own, at: .init(partition: 0, offset: 0)) == nil)
        // a's reader: b's registration replaces a's own in its table; the repair is there already.
        #expect(a.table.apply(publisher.records[2], key: phone, at: .init(partition: 0, offset: 2)))
        let (applied, replaced) = a.table.applyReplacing(publisher.records[1], key: Self.own, at: .init(partition: 0, offset: 1))
        #expect(applied && replaced?.record.token == hexToken(1))
        #expect(a.readOver(publisher.records[0], by: publisher.records[1], key: Self.own, at: .init(partition: 0, offset: 1)) == nil)
        #expect(publisher.records.count == 3)

        // Had b died before repairing, a's reader repairs: a third instance e registers the watch over
        // the iPad's registration on another activity, and f (the iPad's writer) reads it over its own.
        let e = makeRegistry(), f = makeRegistry()
        let own9 = "com.example.food/order-8"
        _ = try await f.registerActivityToken(user: "u", activityId: "order-8", on("ipad", token: 5))
        _ = try await e.registerActivityToken(user: "u", activityId: "order-8", on("watch", token: 6))
        let (last, first) = (publisher.records.count - 1, publisher.records.count - 2)
        let over = f.table.applyReplacing(publisher.records[last], key: own9, at: .init(partition: 0, offset: Int64(last)))
        #expect(over.applied && over.replaced?.record.token == hexToken(5))
        await f.readOver(publisher.records[first], by: publisher.records[last], key: own9, at: .init(partition: 0, offset: Int64(last)))?.value
        #expect(publisher.records.last?.key == "com.example.food/order-8/ipad" && publisher.records.last?.token == hexToken(5))
        // A rotation by the same device is not a lost device: nothing to repair.
        let c = makeRegistry(), d = makeRegistry()
        _ = try await c.registerActivityToken(user: "u", activityId: "order-9", on("phone", token: 3))
        _ = try await d.registerActivityToken(user: "u", activityId: "order-9", on("phone", token: 4))
        let count = publisher.records.count
        #expect(d.readBehindRegistration(publisher.records[count - 2], key: "com.example.food/order-9", at: .init(partition: 0, offset: Int64(count - 2))) == nil)
    }
}
