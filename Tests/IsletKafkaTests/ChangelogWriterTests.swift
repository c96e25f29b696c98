import Foundation
import IsletKafka
import IsletTesting
import Logging
import Synchronization
import Testing

/// The one changelog writer (``ChangelogWriter``) the budgets and the activity memories use, on
/// the in-memory cluster with a source of numbered changes.
@Suite("The changelog writer", .timeLimit(.minutes(1)))
struct ChangelogWriterTests {
    /// Changes `0..<count` of one partition, taken once; ownership set by the test.
    final class Numbers: ChangelogSource {
        let partition: Int32
        let pending: Mutex<[Int]>
        let owned: Mutex<Set<Int32>>
        let handedBack = Mutex<[Int]>([])

        init(count: Int, partition: Int32) {
            self.partition = partition
            pending = Mutex(Array(0..<count))
            owned = Mutex([partition])
        }

        var ownedPartitions: Set<Int32> { owned.withLock { $0 } }
        var now: Date { Date(timeIntervalSince1970: 0) }
        func take(partitions: Set<Int32>, settleWithin: Duration?) async throws(ChangelogRoundRefused) -> (round: Void, changes: [Int]) {
            ((), partitions.contains(partition) ? pending.withLock { pending in defer { pending = [] }; return pending } : [])
        }
        func partition(of change: Int) -> Int32 { partition }
        func record(of change: Int, writtenAt: Date) throws -> (key: String, value: [UInt8]?) { ("\(change)", [1]) }
        func takeBack(_ changes: [Int], writable: Set<Int32>) { handedBack.withLock { $0 += changes } }
        func revoking(_ partitions: Set<Int32>) { owned.withLock { $0.subtract(partitions) } }
        func name(of change: Int) -> String { "\(change)" }
    }

    static func writer(_ source: Numbers, bus: MemoryBus, oneAtATime: Bool) -> ChangelogWriter<Numbers> {
        ChangelogWriter(
            source: source, producer: bus, topic: "changelog", interval: .seconds(60), slice: 256, oneAtATime: oneAtATime, name: "test changelog",
            metrics: "test_changelog", logger: Logger(label: "test"))
    }

    /// A round of 300 changes of partition 1 whose first slice (256) Kafka holds while the
    /// partition is revoked (the revocation's round waits for the one under way at most its time
    /// when rounds run one at a time); then Kafka takes everything. Returns what the round wrote.
    static func roundRevokedUnderWay(oneAtATime: Bool) async throws -> (bus: MemoryBus, after: (handedBack: [Int], failure: String?), written: Int) {
        let bus = MemoryBus(partitions: ["changelog": 2])
        let source = Numbers(count: 300, partition: 1)
        let writer = Self.writer(source, bus: bus, oneAtATime: oneAtATime)
        bus.failProduces { $0 == "changelog" ? .hold : nil }
        let round = Task { await writer.write() }
        try await eventually("the first slice held") { bus.heldProduces == 256 }
        await writer.revoked([1], within: .milliseconds(200))
        bus.failProduces(nil)
        bus.releaseHeldProduces()
        let written = await round.value
        return (bus, (source.handedBack.withLock { $0 }, writer.failure), written)
    }

    @Test("rounds that may overlap (the budgets'): a round under way when its partition is revoked writes all it took; the revocation's round finds nothing left and does not wait for it")
    func overlappingRoundWritesWhatItTook() async throws {
        let (bus, after, written) = try await Self.roundRevokedUnderWay(oneAtATime: false)
        #expect(written == 300)
        #expect(bus.records("changelog").count == 300)
        #expect(after.handedBack.isEmpty)
    }

    @Test("rounds one at a time (the memories'): what a round took of a partition revoked meanwhile is not handed to Kafka any more, but handed back")
    func oneAtATimeStopsAtTheRevocation() async throws {
        let (bus, after, written) = try await Self.roundRevokedUnderWay(oneAtATime: true)
        #expect(written == 256)
        #expect(bus.records("changelog").count == 256)
        #expect(after.handedBack == Array(256..<300))
        #expect(after.failure == nil, "not a failure: those are another instance's to write now")
    }
}
