import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// The activity memories of content-service as a changelog's source (``ChangelogWriter``), in the
/// manner of a Kafka Streams store: for each activity partition this instance owns, the memory of
/// each activity that changed (the latest only: many changes of one activity make one record),
/// then the partition's checkpoint, the positions of the memory replica (``ReadPositions``) taken
/// before those memories.
///
/// The memories written must not run ahead of Kafka: a memory that counts an event whose requests
/// are not acknowledged yet would, after a crash, make the event a duplicate and lose its requests.
/// So a round begins in the service's turn (``RequestSender/turn(_:)``) once every request sent is
/// acknowledged; the positions and the memories are taken there, and written outside the turn.
/// A memory whose write fails is written in the next round, and its partition's checkpoint waits.
public final class ContentChanges: ChangelogSource {
    let engine: ContentEngine
    let sender: RequestSender
    let positions: ReadPositions
    /// How long a round waits for the requests sent to be acknowledged before it gives up.
    let settleTimeout: Duration
    /// The positions each partition's last checkpoint named (not written again unchanged).
    private let checkpoints = Mutex<[Int32: [KafkaTopicPartition: Int64]]>([:])
    /// Events that scheduled a step (``ContentEngine/commit(_:)-(Scheduled)``), by partition: each
    /// is processed once a round wrote its activity's memory — waiting for the next round, or in
    /// the round under way (taken after the step was kept).
    /// Partitions being revoked (``abandonAwaiting(_:)``, until ``reopen(_:)``): an event of one that
    /// comes to wait now is left to the next owner at once, so that no revocation waits for a round.
    private let awaiting = Mutex<(next: [Int32: [Awaiting]], inRound: [Int32: [Awaiting]], closed: Set<Int32>)>(([:], [:], []))

    /// An event waiting for the changelog, and what to do with it.
    struct Awaiting: Sendable {
        /// Written: the event is processed.
        let done: @Sendable () -> Void
        /// Its partition goes to another instance first: left to the next owner, which reads it again.
        let abandon: @Sendable () -> Void
    }

    /// Calls `done` once a round has written the memories of `partition` as they are now, or
    /// `abandon` when the partition is revoked before that.
    public func afterNextRound(partition: Int32, done: @escaping @Sendable () -> Void, abandon: @escaping @Sendable () -> Void) {
        let closed = awaiting.withLock { awaiting in
            if awaiting.closed.contains(partition) { return true }
            awaiting.next[partition, default: []].append(Awaiting(done: done, abandon: abandon))
            return false
        }
        if closed { abandon() }
    }

    /// The partitions are being revoked: the events waiting for the next round are left to their
    /// next owner (the revocation's round writes the memories, and the owner reads the events
    /// again: a step read twice is kept once). Those in the round under way finish with it.
    public func abandonAwaiting(_ partitions: Set<Int32>) {
        let abandoned = awaiting.withLock { awaiting in
            awaiting.closed.formUnion(partitions)
            return partitions.flatMap { awaiting.next.removeValue(forKey: $0) ?? [] }
        }
        for item in abandoned { item.abandon() }
    }

    /// The partitions are this instance's again (assigned): their events wait for rounds again.
    public func reopen(_ partitions: Set<Int32>) {
        awaiting.withLock { $0.closed.subtract(partitions) }
    }

    init(engine: ContentEngine, sender: RequestSender, positions: ReadPositions, settleTimeout: Duration) {
        self.engine = engine
        self.sender = sender
        self.positions = positions
        self.settleTimeout = settleTimeout
    }

    public var ownedPartitions: Set<Int32> { sender.ownedPartitions }
    public var now: Date { engine.clock.date }

    /// No periodic round (nor a freshness pass) takes them any more: the revocation's may, until
    /// its timeout. Another owner's checkpoint may follow: the next one of this instance is
    /// written whatever it says.
    public func revoking(_ partitions: Set<Int32>) {
        sender.disown(Array(partitions))
        checkpoints.withLock { checkpoints in for partition in partitions { checkpoints[partition] = nil } }
    }

    /// Every request sent acknowledged, then the positions, then the memories (which reflect at
    /// least every record before the positions).
    public func take(partitions: Set<Int32>, settleWithin: Duration?) async throws(ChangelogRoundRefused)
        -> (round: [KafkaTopicPartition: Int64], changes: [ContentEngine.Unwritten])
    {
        let settleTimeout = min(settleWithin ?? self.settleTimeout, self.settleTimeout)
        let (sender, engine, positions) = (self.sender, self.engine, self.positions)
        let taken = try? await sender.turn { () async -> ([KafkaTopicPartition: Int64], [ContentEngine.Unwritten])? in
            guard await sender.settle(within: settleTimeout) else { return nil }
            let current = positions.current
            // The events that scheduled a step so far: their memories are in what is taken now.
            self.awaiting.withLock { awaiting in
                for partition in partitions { if let items = awaiting.next.removeValue(forKey: partition) { awaiting.inRound[partition, default: []] += items } }
            }
            return (current, engine.takeUnwritten(partitions: partitions))
        }
        guard let taken = taken ?? nil else {
            throw ChangelogRoundRefused("the requests sent were not all acknowledged within \(settleTimeout): the changelog waits for the next round")
        }
        return taken
    }

    public func partition(of change: ContentEngine.Unwritten) -> Int32 { change.partition }

    public func name(of change: ContentEngine.Unwritten) -> String { change.activityKey }

    public func failure(records: Int, partitions: [Int32], error: any Error) -> String {
        "\(records) memories and the checkpoints of partitions \(partitions) not written: \(error)"
    }

    public func record(of change: ContentEngine.Unwritten, writtenAt: Date) throws -> (key: String, value: [UInt8]?) {
        (change.activityKey, try change.memory.map { memory in
            try IsletJSON.encode(ContentMemoryRecord(activity: memory.record(activityKey: change.activityKey, partition: change.partition), writtenAt: writtenAt))
        })
    }

    /// Handed back whatever their partition: the engine keeps those of the partitions it tracks.
    public func takeBack(_ changes: [ContentEngine.Unwritten], writable: Set<Int32>) {
        engine.unwrittenAgain(changes)
    }

    /// The checkpoint of each partition whose memories are all written: after memories of it were
    /// written (the latest checkpoint must then be this one), or when the positions moved.
    public func finish(
        _ round: [KafkaTopicPartition: Int64], partitions: Set<Int32>, written: Set<Int32>, writtenAt: Date, send: ContentChangelog.Send
    ) async -> (failed: Set<Int32>, error: (any Error)?) {
        let named = round.sorted { ($0.key.topic, $0.key.partition) < ($1.key.topic, $1.key.partition) }
            .map { ContentMemoryRecord.Position(topic: $0.key.topic, partition: $0.key.partition, offset: $0.value) }
        // The memories of `partitions` are written (those whose writes failed are not among them):
        // the events waiting for them are processed; the others wait for the next round.
        let (finished, abandoned) = awaiting.withLock { awaiting in
            let finished = partitions.flatMap { awaiting.inRound.removeValue(forKey: $0) ?? [] }
            // Not written: the next round, unless their partition is being revoked meanwhile.
            var abandoned: [Awaiting] = []
            for (partition, items) in awaiting.inRound {
                if awaiting.closed.contains(partition) { abandoned += items } else { awaiting.next[partition, default: []] += items }
            }
            awaiting.inRound = [:]
            return (finished, abandoned)
        }
        for item in finished { item.done() }
        for item in abandoned { item.abandon() }
        var failed = (Set<Int32>(), (any Error)?.none)
        for partition in partitions.sorted() where written.contains(partition) || checkpoints.withLock({ $0[partition] }) != round {
            do {
                let record = ContentMemoryRecord(checkpoint: .init(partition: partition, positions: named), writtenAt: writtenAt)
                if try await send(ContentMemoryRecord.checkpointKey, try IsletJSON.encode(record), partition) {
                    checkpoints.withLock { $0[partition] = round }
                }
            } catch {
                failed.0.insert(partition)
                failed.1 = error
            }
        }
        return failed
    }
}
