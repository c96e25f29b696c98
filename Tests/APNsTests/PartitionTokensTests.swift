@testable import APNsDispatcher
import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import Synchronization
import Testing

@Suite("Partition tokens: the compact, partition-local token table")
struct PartitionTokensTests {
    static let app = AppTarget(bundleId: "com.example.food", environment: .production)
    static let now = Date(timeIntervalSince1970: 1_795_000_000.123)

    static func update(_ activity: String, token: String = hexToken(1), state: TokenState = .active, registeredAt: Date = now, bundleId: String = "com.example.food")
        -> TokenRecord
    {
        TokenRecord(
            kind: .update, activityId: activity, userId: "u1", token: token, app: AppTarget(bundleId: bundleId, environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "2.1", state: state,
            invalidation: state == .invalidated ? .init(reason: .clientEnded, invalidatedAt: now) : nil,
            activityStartedAt: now.addingTimeInterval(-60), registeredAt: registeredAt, updatedAt: registeredAt)
    }

    @Test("a token reads back as it was registered: bytes to hex, the shared profile, times to the millisecond")
    func roundTrip() throws {
        let tokens = PartitionTokens()
        tokens.own(partitions: [3])
        let record = Self.update("order-1", token: hexToken(7, bytes: 80))
        #expect(tokens.apply(record, key: record.key!, partition: 3, offset: 10))
        let read = try #require(tokens.token(forKey: "com.example.food/order-1"))
        #expect(read == DeliveryToken(record))
        #expect(read.token.utf8.count == 160)
        #expect(read.deviceId == nil)

        let start = TokenRecord(
            kind: .pushToStart, deviceId: "5D3F8A2E-9C41", userId: "u1", token: hexToken(8, bytes: 32), app: Self.app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "2.0", state: .active, registeredAt: Self.now,
            updatedAt: Self.now)
        #expect(tokens.apply(start, key: start.key!, partition: 3, offset: 11))
        let readStart = try #require(tokens.token(forKey: "pts:com.example.food:5D3F8A2E-9C41:DeliveryAttributes"))
        #expect(readStart == DeliveryToken(start))
        #expect(readStart.deviceId == "5D3F8A2E-9C41")
    }

    @Test("only owned partitions are held; dropping partitions forgets their tokens and no other")
    func ownership() {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0, 1])
        let (a, b, c) = (Self.update("a"), Self.update("b"), Self.update("c"))
        #expect(tokens.apply(a, key: a.key!, partition: 0, offset: 0))
        #expect(tokens.apply(b, key: b.key!, partition: 1, offset: 0))
        #expect(!tokens.apply(c, key: c.key!, partition: 2, offset: 0), "partition 2 is not owned")
        #expect(tokens.countByPartition == [0: 1, 1: 1])

        tokens.drop(partitions: [1])
        #expect(tokens.token(forKey: a.key!) != nil)
        #expect(tokens.token(forKey: b.key!) == nil)
        #expect(tokens.ownedPartitions == [0])
        #expect(!tokens.apply(b, key: b.key!, partition: 1, offset: 1), "a dropped partition's records are ignored")
    }

    @Test("the table never moves back in a partition; a tombstone removes the key")
    func order() {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0])
        let old = Self.update("a", token: hexToken(1))
        let new = Self.update("a", token: hexToken(2), state: .invalidated)
        #expect(tokens.apply(new, key: new.key!, partition: 0, offset: 5))
        #expect(!tokens.apply(old, key: old.key!, partition: 0, offset: 4))
        #expect(tokens.token(forKey: "com.example.food/a")?.state == .invalidated)
        tokens.remove(key: "com.example.food/a", partition: 0, offset: 3)
        #expect(tokens.token(forKey: "com.example.food/a") != nil, "an older tombstone changes nothing")
        tokens.remove(key: "com.example.food/a", partition: 0, offset: 6)
        #expect(tokens.token(forKey: "com.example.food/a") == nil)
    }

    @Test("a record under its old, unscoped key is held under its app's key; the old key's tombstone leaves a record written since")
    func legacyKeys() {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0])
        let record = Self.update("order-9")
        #expect(tokens.apply(record, key: "order-9", partition: 0, offset: 1))
        #expect(tokens.token(forKey: "com.example.food/order-9") != nil)
        // token-registry writes the scoped key, then deletes the bare one.
        #expect(tokens.apply(record, key: record.key!, partition: 0, offset: 2))
        tokens.remove(key: "order-9", partition: 0, offset: 3)
        #expect(tokens.token(forKey: "com.example.food/order-9") != nil)

        // Another app's record under the same bare key replaces the first app's on the topic.
        let other = Self.update("order-7", bundleId: "com.example.rides")
        let first = Self.update("order-7")
        #expect(tokens.apply(first, key: "order-7", partition: 0, offset: 4))
        #expect(tokens.apply(other, key: "order-7", partition: 0, offset: 5))
        #expect(tokens.token(forKey: "com.example.food/order-7") == nil)
        #expect(tokens.token(forKey: "com.example.rides/order-7") != nil)
        tokens.remove(key: "order-7", partition: 0, offset: 6)
        #expect(tokens.token(forKey: "com.example.rides/order-7") == nil)
    }

    @Test("the shared profiles follow the tokens held: an app that reports a new version or language on every registration does not grow them (issue 57)")
    func profilesFollowTheTokens() throws {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0, 1])
        for version in 0..<2_000 {
            var record = Self.update("order-\(version % 10)")
            record.appVersion = "2.\(version)"
            record.locale = version.isMultiple(of: 2) ? "en" : "de-\(version)"
            tokens.apply(record, key: record.key!, partition: 0, offset: Int64(version))
        }
        #expect(tokens.count == 10)
        #expect(tokens.profileCount <= 10, "one profile per token held at most (\(tokens.profileCount))")
        let other = Self.update("order-x", bundleId: "com.example.ride")
        tokens.apply(other, key: other.key!, partition: 1, offset: 0)
        #expect(tokens.keys(forActivity: "order-x") == ["com.example.ride/order-x"])
        tokens.drop(partitions: [0, 1])
        #expect(tokens.profileCount == 0)
        #expect(tokens.keys(forActivity: "order-x").isEmpty)
    }

    @Test("observers hear of every record applied, by key")
    func observers() {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0])
        let heard = Mutex<[String]>([])
        tokens.onApply { key in heard.withLock { $0.append(key) } }
        let record = Self.update("a")
        tokens.apply(record, key: record.key!, partition: 0, offset: 0)
        tokens.apply(record, key: record.key!, partition: 0, offset: 0)
        #expect(heard.withLock { $0 } == ["com.example.food/a"])
    }
}

@Suite("Outcomes read on assignment")
struct RecentOutcomesWindowTests {
    @Test("the read starts at the first request read again, less a margin for clocks; never earlier than the window")
    func since() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        let window = Duration.seconds(3_600)
        let recent = Int64((now.timeIntervalSince1970 - 10) * 1_000)
        #expect(RecentOutcomes.since(window: window, firstRequestAt: recent, now: now) == now.addingTimeInterval(-10 - 600))
        let old = Int64((now.timeIntervalSince1970 - 86_400) * 1_000)
        #expect(RecentOutcomes.since(window: window, firstRequestAt: old, now: now) == now.addingTimeInterval(-3_600))
        #expect(RecentOutcomes.since(window: window, firstRequestAt: nil, now: now) == now.addingTimeInterval(-3_600))
    }

    @Test("a read cut short is done again for as long as the partition is wanted (an hour of failures too), pausing 1 s doubling to 10 s")
    func rereadsNeverGiveUp() {
        var rereads = RecentOutcomes.Rereads()
        var pauses: [Duration] = []
        var waited = Duration.zero
        // Issue 57, item 6: the read gave up after 300 s and the partition's requests went on
        // without their outcomes (everything read again sent again, push-to-starts too).
        while waited < .seconds(3_600) {
            guard let pause = rereads.cutShort(stillWanted: true) else {
                Issue.record("gave up after \(rereads.tries) tries, \(waited)")
                return
            }
            pauses.append(pause)
            waited += pause
        }
        #expect(Array(pauses.prefix(6)) == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10)])
        #expect(pauses.allSatisfy { $0 <= RecentOutcomes.Rereads.longestPause })
        #expect(rereads.cutShort(stillWanted: false) == nil)
    }

    @Test("the service's read of recent outcomes waits out an outage of hours and then goes on with what it read, never without it")
    func readThroughAnOutage() async {
        var finished = RecentOutcomes.Ids()
        finished.finished = ["a-push-to-start"]
        var failures = 0
        var paused = Duration.zero
        // Two hours of reads cut short (each pause as Rereads says), then a complete one.
        let ids = await RecentOutcomes.read(partition: 3, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), wanted: { true }, pause: { paused += $0 }) {
            guard paused >= .seconds(7_200) else {
                failures += 1
                return nil
            }
            return finished
        }
        #expect(ids?.finished == ["a-push-to-start"])
        #expect(failures > 700)
        // The partition moves on meanwhile: the read stops, with nothing to go on with.
        var reads = 0
        let stopped = await RecentOutcomes.read(partition: 3, logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), wanted: { reads < 3 }, pause: { _ in }) {
            reads += 1
            return nil
        }
        #expect(stopped == nil)
        #expect(reads == 3)
    }
}

@Suite("Partition tokens: the token arena")
struct TokenArenaTests {
    @Test("tokens replaced and partitions dropped leave space that is reclaimed; every token reads back after the arena is packed")
    func compaction() throws {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0, 1])
        var offset: Int64 = 0
        func put(_ activity: String, seed: Int, partition: Int32) {
            offset += 1
            let record = PartitionTokensTests.update(activity, token: hexToken(seed, bytes: 80))
            tokens.apply(record, key: record.key!, partition: partition, offset: offset)
        }
        for index in 0..<1_000 { put("a\(index)", seed: index, partition: Int32(index % 2)) }
        #expect(tokens.arenaBytes.used == 80_000)
        // Each token rotated five times: without reclaiming, the arena would hold six times as much.
        for round in 1...5 {
            for index in 0..<1_000 { put("a\(index)", seed: index + round * 1_000, partition: Int32(index % 2)) }
        }
        let afterRotations = tokens.arenaBytes
        #expect(afterRotations.used - afterRotations.garbage == 80_000)
        #expect(afterRotations.used <= 2 * 80_000 + 65_536)
        for index in 0..<1_000 {
            #expect(tokens.token(forKey: "com.example.food/a\(index)")?.token == hexToken(index + 5_000, bytes: 80))
        }
        tokens.drop(partitions: [1])
        #expect(tokens.count == 500)
        #expect(tokens.arenaBytes.used - tokens.arenaBytes.garbage == 40_000)
        for index in stride(from: 0, to: 1_000, by: 2) {
            #expect(tokens.token(forKey: "com.example.food/a\(index)")?.token == hexToken(index + 5_000, bytes: 80))
        }
    }
}
