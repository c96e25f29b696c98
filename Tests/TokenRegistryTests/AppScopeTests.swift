import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletKafka
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import TokenRegistry
import HTTPTypes
import SwiftProtobuf

/// Activity ids are chosen by backends, so two apps may use the same one: an activity is its app
/// and its id together (`<bundleId>/<activityId>`), everywhere the registry keys state.
@Suite("Activity ids are scoped per app")
struct AppScopeTests {
    let clock = ManualClock()
    let publisher = RecordingPublisher()
    static let food = AppTarget(bundleId: "com.example.food", environment: .production)
    static let ride = AppTarget(bundleId: "com.example.ride", environment: .production)

    func makeRegistry(_ table: TokenTable = TokenTable()) -> Registry {
        let registry = Registry(table: table, publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        return registry
    }

    /// An active update token of `activity` in `app`, registered now.
    func record(_ activity: String, user: String = "alice", app: AppTarget = Self.food, token: String = hexToken(1)) -> TokenRecord {
        TokenRecord(
            kind: .update, activityId: activity, userId: user, token: token, app: app,
            attributesType: app == Self.ride ? "RideAttributes" : "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0",
            state: .active, registeredAt: clock.date, updatedAt: clock.date)
    }

    /// A registry over a table holding `activity`'s record under its bare id (written before ids
    /// were scoped per app), publishing through a loader-first publisher.
    func legacyRegistry(_ activity: String) -> (TokenTable, LoaderFirstPublisher, Registry) {
        let table = TokenTable()
        table.apply(record(activity), key: activity, at: nil)
        let publisher = LoaderFirstPublisher(table: table)
        let registry = Registry(table: table, publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        return (table, publisher, registry)
    }

    func request(_ app: AppTarget, token: String) -> RegisterActivityTokenRequest {
        RegisterActivityTokenRequest(
            token: token, attributesType: app == Self.ride ? "RideAttributes" : "DeliveryAttributes", app: app,
            frequentUpdatesEnabled: false, appVersion: "1.0")
    }

    @Test("the same id in two apps is two activities: each user registers theirs (201), reads and ends only theirs, and neither record replaces the other")
    func sameIdInTwoApps() async throws {
        let registry = makeRegistry()
        #expect(try await registry.registerActivityToken(user: "alice", activityId: "order-43", request(Self.food, token: hexToken(1))).change == .registered)
        #expect(try await registry.registerActivityToken(user: "bob", activityId: "order-43", request(Self.ride, token: hexToken(2))).change == .registered)
        #expect(publisher.records.map(\.key) == ["com.example.food/order-43", "com.example.ride/order-43"])
        #expect(registry.table.keys(forActivity: "order-43") == ["com.example.food/order-43", "com.example.ride/order-43"])

        // Without the app named, a user's own activity of that id; another's stays unknown (404).
        #expect(try registry.activity(user: "alice", activityId: "order-43").app == Self.food)
        #expect(try registry.activity(user: "bob", activityId: "order-43").app == Self.ride)
        #expect(throws: APIError.notFound) { try registry.activity(user: "bob", activityId: "order-43", bundleId: "com.example.food") }
        #expect(throws: APIError.notFound) { try registry.activity(user: "carol", activityId: "order-43") }
        await #expect(throws: APIError.notFound) {
            try await registry.invalidateActivity(user: "bob", activityId: "order-43", bundleId: "com.example.food", reason: .clientEnded)
        }

        // Bob ends his; Alice's is untouched.
        _ = try await registry.invalidateActivity(user: "bob", activityId: "order-43", reason: .clientEnded)
        #expect(registry.table.record(forKey: "com.example.ride/order-43")?.state == .invalidated)
        #expect(registry.table.record(forKey: "com.example.food/order-43")?.state == .active)
        // A bad bundle id in the query is a 400 naming it, not a lookup.
        #expect { try registry.activity(user: "alice", activityId: "order-43", bundleId: "not a bundle") } throws: {
            ($0 as? APIError)?.field == "bundleId" && ($0 as? APIError)?.status == .badRequest
        }
    }

    @Test("one user with the id in two apps must name the app (409 on bundleId), and then gets each")
    func ambiguousForItsOwner() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "x-1", request(Self.food, token: hexToken(1)))
        _ = try await registry.registerActivityToken(user: "alice", activityId: "x-1", request(Self.ride, token: hexToken(2)))
        let error = #expect(throws: APIError.self) { try registry.activity(user: "alice", activityId: "x-1") }
        #expect(error?.status == .conflict && error?.field == "bundleId")
        #expect(try registry.activity(user: "alice", activityId: "x-1", bundleId: "com.example.ride").app == Self.ride)
        let before = publisher.records.count
        await #expect(throws: APIError.self) { try await registry.setFrequentUpdates(user: "alice", activityId: "x-1", enabled: true) }
        #expect(publisher.records.count == before, "a refused call writes nothing")
        _ = try await registry.setFrequentUpdates(user: "alice", activityId: "x-1", bundleId: "com.example.food", enabled: true)
        #expect(registry.table.record(forKey: "com.example.food/x-1")?.frequentUpdatesEnabled == true)
        #expect(registry.table.record(forKey: "com.example.ride/x-1")?.frequentUpdatesEnabled == false)
    }

    @Test("an outcome names its app: a 410 for one app's activity invalidates that one only; an old outcome without its app, only when one app has the id")
    func outcomesPerApp() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "order-9", request(Self.food, token: hexToken(1)))
        _ = try await registry.registerActivityToken(user: "bob", activityId: "order-9", request(Self.ride, token: hexToken(2)))
        clock.advance(60)
        func gone(_ bundleId: String?, token: String) -> PushOutcome {
            PushOutcome(
                requestId: UUID().uuidString, activityId: "order-9", result: .tokenInvalid,
                apns: .init(status: 410, reason: "Unregistered", timestamp: clock.date), attempts: 1,
                tokenFingerprint: TokenFingerprint.of(token: token), completedAt: clock.date, bundleId: bundleId)
        }
        #expect(try await registry.handle(gone(nil, token: hexToken(2))) == .ignore("an outcome without its app, for an id registered in several apps"))
        #expect(try await registry.handle(gone("com.example.ride", token: hexToken(2))) == .invalidate(.apnsUnregistered, since: clock.date))
        #expect(registry.table.record(forKey: "com.example.ride/order-9")?.state == .invalidated)
        #expect(registry.table.record(forKey: "com.example.food/order-9")?.state == .active)

        _ = try await registry.registerActivityToken(user: "alice", activityId: "order-10", request(Self.food, token: hexToken(3)))
        clock.advance(60)
        #expect(try await registry.handle(gone(nil, token: hexToken(3)).with(activityId: "order-10")) == .invalidate(.apnsUnregistered, since: clock.date))
        #expect(registry.table.record(forKey: "com.example.food/order-10")?.state == .invalidated)
    }

    @Test("a record written under the bare activity id (before ids were scoped) is read under its app's key; the next change writes the app's key and deletes the bare one")
    func legacyRecords() async throws {
        let table = TokenTable()
        let old = record("order-5")
        #expect(old.legacyKey == "order-5")
        // (No position: the recording publisher numbers its own writes from offset 0.)
        table.apply(old, key: "order-5", at: nil)
        #expect(table.record(forKey: "com.example.food/order-5") == old)
        #expect(table.legacyTopicKey(forKey: "com.example.food/order-5") == "order-5")
        #expect(table.keys(forActivity: "order-5") == ["com.example.food/order-5"])

        let registry = makeRegistry(table)
        #expect(try registry.activity(user: "alice", activityId: "order-5").state == .active)
        let rotated = try await registry.registerActivityToken(user: "alice", activityId: "order-5", request(Self.food, token: hexToken(2)))
        #expect(rotated.change == .rotated)
        #expect(publisher.records.last?.key == "com.example.food/order-5")
        #expect(publisher.tombstones == ["order-5"], "the bare key is deleted once the app's key holds the record")
        #expect(table.legacyTopicKey(forKey: "com.example.food/order-5") == nil)
        // The tombstone of the bare key, read back later, leaves the record under the app's key.
        table.remove(key: "order-5", at: .init(partition: 0, offset: 99))
        #expect(table.record(forKey: "com.example.food/order-5")?.token == hexToken(2))

        // A bare-key record and its tombstone, read in order (a rebuild), leave nothing.
        let rebuilt = TokenTable()
        rebuilt.apply(old, key: "order-5", at: .init(partition: 0, offset: 0))
        rebuilt.remove(key: "order-5", at: .init(partition: 0, offset: 1))
        #expect(rebuilt.record(forKey: "com.example.food/order-5") == nil && rebuilt.keys(forActivity: "order-5").isEmpty)
    }

    @Test("the bare key's later record replaces its earlier one even across apps (a squatter's record in one app, then the ticketed owner's in another): a rebuild keeps only the owner's")
    func legacyKeyAcrossApps() {
        let table = TokenTable()
        let squat = record("order-42", user: "mallory", app: Self.ride)
        var owner = squat
        owner.userId = "alice"
        owner.app = Self.food
        owner.ownerVerified = true
        table.apply(squat, key: "order-42", at: .init(partition: 0, offset: 10))
        table.apply(owner, key: "order-42", at: .init(partition: 0, offset: 20))
        #expect(table.record(forKey: "com.example.ride/order-42") == nil, "the squatter's record was replaced on the topic")
        #expect(table.record(forKey: "com.example.food/order-42")?.userId == "alice")
        #expect(table.keys(forActivity: "order-42") == ["com.example.food/order-42"])
        #expect(table.activeCount(ofUser: "mallory", kind: .update) == 0)
        table.remove(key: "order-42", at: .init(partition: 0, offset: 30))
        #expect(table.count == 0)
    }

    @Test("the bare key is deleted even when the table's loader applies the new record before the write returns (it is read before the write)")
    func legacyTombstoneRace() async throws {
        let (_, publisher, registry) = legacyRegistry("order-6")
        _ = try await registry.setFrequentUpdates(user: "alice", activityId: "order-6", enabled: true)
        #expect(publisher.tombstones == ["order-6"])
    }

    @Test("a bare key Kafka refused to delete is deleted by the next sweep")
    func legacyTombstoneRetried() async throws {
        let (_, publisher, registry) = legacyRegistry("order-7")
        publisher.refuseTombstones = true
        _ = try await registry.setFrequentUpdates(user: "alice", activityId: "order-7", enabled: true)
        #expect(publisher.tombstones.isEmpty)
        publisher.refuseTombstones = false
        _ = await registry.sweep(invalidatedFor: .zero)
        #expect(publisher.tombstones == ["order-7"])
        _ = await registry.sweep(invalidatedFor: .zero)
        #expect(publisher.tombstones == ["order-7"], "once")
    }

    @Test("ISLET_APPS: a registration for an app the registry does not serve is 400 on the app, and nothing is written")
    func servedApps() async throws {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, apps: ["com.example.food"], clock: clock)
        registry.markReady()
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(Self.ride, token: hexToken(1)))
        }
        #expect(error?.status == .badRequest && error?.field == "app.bundleId")
        let device = await #expect(throws: APIError.self) {
            try await registry.registerPushToStartToken(
                user: "mallory", bundleId: "com.fake.app", deviceId: "d1", attributesType: "RideAttributes",
                RegisterPushToStartTokenRequest(token: hexToken(2), environment: .production, frequentUpdatesEnabled: false, appVersion: "1.0"))
        }
        #expect(device?.status == .badRequest && device?.field == "bundleId")
        #expect(publisher.records.isEmpty)
        #expect(try await registry.registerActivityToken(user: "alice", activityId: "order-43", request(Self.food, token: hexToken(3))).change == .registered)
        let settings = try RegistrySettings(
            from: .variables(["ISLET_AUTH_HS256_KEYS": "k=\(TestKeys.hsSecret)", "ISLET_APPS": "com.example.food, com.example.ride"]))
        #expect(settings.apps == ["com.example.food", "com.example.ride"])
        #expect(throws: ConfigurationError.self) {
            try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": "k=\(TestKeys.hsSecret)", "ISLET_APPS": "food"]))
        }
    }

    @Test("while the table is being rebuilt, an invalidation is 503 (retry), not 404")
    func invalidateWhileLoading() async throws {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: clock)
        let error = await #expect(throws: APIError.self) {
            try await registry.invalidateActivity(user: "alice", activityId: "order-1", reason: .clientEnded)
        }
        #expect(error?.status == .serviceUnavailable)
    }

    @Test("a claimed activity leaves the squatter's indexes: it is not listed, nor counted toward its quota")
    func claimMovesTheUserIndex() {
        let table = TokenTable()
        var squat = record("order-43", user: "mallory")
        table.apply(squat, key: squat.key!, at: .init(partition: 0, offset: 0))
        #expect(table.activeCount(ofUser: "mallory", kind: .update) == 1)
        squat.userId = "alice"
        squat.ownerVerified = true
        table.apply(squat, key: squat.key!, at: .init(partition: 0, offset: 1))
        #expect(table.activities(ofUser: "mallory", in: [.active], limit: 10).isEmpty, "the owner's activity is not listed as the squatter's")
        #expect(table.activeCount(ofUser: "mallory", kind: .update) == 0)
        #expect(table.activities(ofUser: "alice", in: [.active], limit: 10).map(\.userId) == ["alice"])
    }

    @Test("gRPC: bundle_id names the app; without it, the only app with the id, FAILED_PRECONDITION when several have it")
    func grpc() async throws {
        let registry = makeRegistry()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "order-43", request(Self.food, token: hexToken(1)))
        _ = try await registry.registerActivityToken(user: "alice", activityId: "only-1", request(Self.food, token: hexToken(3)))
        _ = try await registry.registerActivityToken(user: "bob", activityId: "order-43", request(Self.ride, token: hexToken(2)))
        try await withGRPCServer([RegistryGRPCService(registry: registry)]) { client in
            let registryClient = Islet_Tokens_V1_TokenRegistry.Client(wrapping: client)
            await #expect { try await registryClient.lookupActivity(.with { $0.activityID = "order-43" }) } throws: {
                ($0 as? RPCError)?.code == .failedPrecondition && ($0 as? RPCError)?.message.contains("com.example.ride") == true
            }
            let ride = try await registryClient.lookupActivity(.with {
                $0.activityID = "order-43"
                $0.bundleID = "com.example.ride"
            })
            #expect(ride.userID == "bob" && ride.bundleID == "com.example.ride")
            #expect(try await registryClient.lookupActivity(.with { $0.activityID = "only-1" }).bundleID == "com.example.food")
            await #expect {
                try await registryClient.lookupActivity(.with {
                    $0.activityID = "only-1"
                    $0.bundleID = "com.example.ride"
                })
            } throws: { ($0 as? RPCError)?.code == .notFound }
            let ended = try await registryClient.invalidateActivity(.with {
                $0.activityID = "order-43"
                $0.bundleID = "com.example.food"
                $0.reason = "backendEnded"
            })
            #expect(ended.userID == "alice" && ended.state == "invalidated")
            #expect(registry.table.record(forKey: "com.example.ride/order-43")?.state == .active)
        }
    }
}

extension PushOutcome {
    func with(activityId: String) -> PushOutcome {
        var copy = self
        copy.activityId = activityId
        return copy
    }
}

/// A publisher whose writes the table's loader applies before the write returns (the loader of the
/// same process reads fast), and that can refuse tombstones.
final class LoaderFirstPublisher: TokenRecordPublisher {
    let table: TokenTable
    private let state = Mutex<(offset: Int64, tombstones: [String], refusing: Bool)>((100, [], false))
    init(table: TokenTable) { self.table = table }

    var tombstones: [String] { state.withLock { $0.tombstones } }
    var refuseTombstones: Bool {
        get { state.withLock { $0.refusing } }
        set { state.withLock { $0.refusing = newValue } }
    }

    func publish(_ record: TokenRecord) async throws -> TokenTable.Position? {
        let position = TokenTable.Position(partition: 0, offset: state.withLock { $0.offset += 1; return $0.offset })
        table.apply(record, key: record.key!, at: position)
        return position
    }

    func tombstone(key: String) async throws -> TokenTable.Position? {
        try state.withLock { state in
            if state.refusing { throw TestKafkaDown() }
            state.tombstones.append(key)
            state.offset += 1
            return TokenTable.Position(partition: 0, offset: state.offset)
        }
    }
}
