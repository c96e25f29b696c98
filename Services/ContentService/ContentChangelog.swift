import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

extension ActivityMemory {
    /// The memory a changelog record holds.
    init(_ record: ContentMemoryRecord.Activity) {
        self.init()
        partition = record.partition
        lastState = record.lastState
        alertTimes = record.alertTimes ?? []
        startedAt = record.startedAt
        if let latest = record.latest {
            restoreLatest(
                LatestRequest(
                    requestId: latest.requestId, event: latest.event, app: latest.app, attributesType: latest.attributesType,
                    createdAt: latest.createdAt, staleDate: latest.staleDate, contentSequence: latest.contentSequence, isContent: latest.content,
                    isPushToStart: latest.pushToStartKey != nil),
                pushToStartKey: latest.pushToStartKey)
        }
        startedWith = record.startedWith
        lastSequence = record.lastSequence
        lastTimestamp = record.lastTimestamp
        ended = record.ended
        payloadStoredAt = record.payloadStoredAt.map { KafkaPosition(partition: $0.partition, offset: $0.offset) }
        // A latest request with no place on Kafka (its delivery report had none) cannot be read
        // again: the monitor leaves the activity alone until its next request, as for a lost one.
        payloadLost = (record.payloadLost ?? false) || (record.latest != nil && record.payloadStoredAt == nil)
        outcomePositions = (record.outcomePositions ?? []).map { KafkaPosition(partition: $0.partition, offset: $0.offset) }
        for outcome in record.outcomes ?? [] { restoreOutcome(requestId: outcome.requestId, result: outcome.result, completedAt: outcome.completedAt) }
        contentRequestId = record.contentRequestId
        resends = record.resends
        lastResendAt = record.lastResendAt
        gone = record.gone
        goneAt = record.goneAt
        goneToken = record.goneToken
        inlinedImages = Set(record.inlinedImages ?? [])
        pendingImages = Dictionary(
            (record.pendingImages ?? []).map { ($0.requestId, PendingImages(urls: Set($0.urls), since: $0.since)) }, uniquingKeysWith: { _, last in last })
    }

    /// The changelog record of this memory, the activity's (`<bundleId>/<activityId>`) in `partition`.
    func record(activityKey: String, partition: Int32) -> ContentMemoryRecord.Activity {
        let bundleId = String(activityKey.prefix { $0 != "/" })
        let activityId = String(activityKey.drop { $0 != "/" }.dropFirst())
        let latest = self.latest.map {
            ContentMemoryRecord.Latest(
                requestId: $0.requestId, event: $0.event, app: $0.app, attributesType: $0.attributesType, createdAt: $0.createdAt,
                staleDate: $0.staleDate, contentSequence: $0.contentSequence, content: $0.isContent, pushToStartKey: latestPushToStartKey)
        }
        let outcomes = self.outcomes.map { ContentMemoryRecord.Outcome(requestId: $0.requestId, result: $0.result, completedAt: $0.completedAt) }
        return ContentMemoryRecord.Activity(
            bundleId: bundleId, activityId: activityId, partition: partition, lastSequence: lastSequence, lastTimestamp: lastTimestamp,
            lastState: lastState, alertTimes: alertTimes.isEmpty ? nil : alertTimes, startedAt: startedAt, ended: ended, latest: latest,
            payloadStoredAt: payloadStoredAt.map { .init(partition: $0.partition, offset: $0.offset) }, payloadLost: payloadLost ? true : nil,
            outcomes: outcomes.isEmpty ? nil : outcomes,
            contentRequestId: contentRequestId, resends: resends, lastResendAt: lastResendAt, gone: gone, goneAt: goneAt, goneToken: goneToken,
            inlinedImages: inlinedImages.isEmpty ? nil : inlinedImages.sorted(),
            pendingImages: pendingImages.isEmpty
                ? nil : pendingImages.sorted { $0.key < $1.key }.map { .init(requestId: $0.key, urls: $0.value.urls.sorted(), since: $0.value.since) },
            outcomePositions: outcomePositions.isEmpty ? nil : outcomePositions.map { .init(partition: $0.partition, offset: $0.offset) },
            startedWith: startedWith)
    }
}

/// Where the memory replica is in each partition of `islet.push-requests.v1` and
/// `islet.push-outcomes.v1`: the next offset to read. Every record before it was applied to the
/// engine's memory (``ContentMemoryLoader``), which is what a checkpoint says.
public final class ReadPositions: Sendable {
    private let positions: Mutex<[KafkaTopicPartition: Int64]>

    public init(_ start: [KafkaTopicPartition: Int64] = [:]) { positions = Mutex(start) }

    /// `message` was applied.
    func applied(_ message: KafkaMessage) {
        positions.withLock { $0[message.topicPartition] = message.offset + 1 }
    }

    func start(at start: [KafkaTopicPartition: Int64]) { positions.withLock { $0.merge(start) { current, _ in current } } }

    public var current: [KafkaTopicPartition: Int64] { positions.withLock { $0 } }
}

/// Writes content-service's changelog, `islet.content-memory.v1` (docs/topics.md), in the manner of
/// a Kafka Streams store: every ``interval``, for each activity partition this instance owns, the
/// memory of each activity that changed (the latest only: many changes of one activity make one
/// record), then the partition's checkpoint, the positions of the memory replica (``ReadPositions``)
/// taken before those memories.
///
/// The memories written must not run ahead of Kafka: a memory that counts an event whose requests
/// are not acknowledged yet would, after a crash, make the event a duplicate and lose its requests.
/// So a write begins in the service's turn (``RequestSender/turn(_:)``) once every request sent is
/// acknowledged; the positions and the memories are taken there, and written outside the turn.
/// A memory whose write fails is written in the next round, and its partition's checkpoint waits.
public final class ChangelogWriter: Service, Sendable {
    let engine: ContentEngine
    let sender: RequestSender
    let producer: any MessageSink
    let positions: ReadPositions
    let topic: String
    public let interval: Duration
    /// How long a round waits for the requests sent to be acknowledged before it gives up.
    let settleTimeout: Duration
    let logger: Logger
    private let state = Mutex(WriterState())
    private let rounds = AsyncSemaphore(1)
    /// Memories encoded and handed to the producer at once.
    static let slice = 10_000

    private struct WriterState {
        /// The positions each partition's last checkpoint named (not written again unchanged).
        var checkpoints: [Int32: [KafkaTopicPartition: Int64]] = [:]
        /// Why the last round failed, if it did.
        var failure: String?
        /// Partitions being revoked, whose revocation round may still write them.
        var releasing: Set<Int32> = []
    }

    public init(
        engine: ContentEngine, sender: RequestSender, producer: any MessageSink, positions: ReadPositions,
        topic: String = IsletTopics.contentMemory.name, interval: Duration = .seconds(5), settleTimeout: Duration = .seconds(5), logger: Logger
    ) {
        self.settleTimeout = settleTimeout
        self.engine = engine
        self.sender = sender
        self.producer = producer
        self.positions = positions
        self.topic = topic
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        while (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }) != nil {
            await write()
        }
        // The last round is the revocation's, when the service stops (``revoked(_:within:)``).
    }

    /// These partitions are being revoked (called from the event loop's revocation handler, once
    /// their events under way are done, before their next owner is assigned them): what changed
    /// in them is written now, so that the next owner (or the next start) reads less again. At
    /// most `timeout` (with Kafka away the next owner reads from the last checkpoint): after it,
    /// nothing more of theirs is handed to Kafka, and their checkpoint is not written.
    public func revoked(_ partitions: Set<Int32>, within timeout: Duration) async {
        // No periodic round takes them any more; this one may, until the timeout.
        sender.disown(Array(partitions))
        state.withLock { state in
            state.releasing.formUnion(partitions)
            // Another owner's checkpoint may follow: the next one of this instance is written whatever it says.
            for partition in partitions { state.checkpoints[partition] = nil }
        }
        await waitAtMost(timeout) { await self.write(partitions: partitions, settleWithin: min(self.settleTimeout, timeout / 2)) }
        state.withLock { $0.releasing.subtract(partitions) }
    }

    /// Why the last round did not write everything (`nil`: it did).
    public var failure: String? { state.withLock { $0.failure } }

    /// The partitions a round may still write: those owned, and those being revoked.
    private var writable: Set<Int32> { sender.ownedPartitions.union(state.withLock { $0.releasing }) }

    /// One round, of the partitions owned (or of these). Rounds run one at a time (a revocation's
    /// waits for the one under way), and each slice and checkpoint is handed to Kafka only while
    /// its partition is still this instance's: owned, or being revoked within the revocation's
    /// time. Returns the memories written.
    @discardableResult
    public func write(partitions: Set<Int32>? = nil, settleWithin: Duration? = nil) async -> Int {
        // Cancelled while another round runs: the service is stopping; that round writes.
        guard (try? await rounds.acquire()) != nil else { return 0 }
        defer { rounds.release() }
        let owned = (partitions ?? sender.ownedPartitions).intersection(partitions == nil ? sender.ownedPartitions : writable)
        guard !owned.isEmpty else {
            state.withLock { $0.failure = nil }
            return 0
        }
        // Every request sent acknowledged, then the positions, then the memories (which reflect
        // at least every record before the positions).
        let settleTimeout = settleWithin ?? self.settleTimeout
        let taken: (positions: [KafkaTopicPartition: Int64], changes: [ContentEngine.Unwritten])? = try? await sender.turn {
            guard await sender.settle(within: settleTimeout) else { return nil }
            let positions = self.positions.current
            return (positions, engine.takeUnwritten(partitions: owned))
        }
        guard let taken else {
            fail("the requests sent were not all acknowledged within \(settleTimeout): the changelog waits for the next round")
            return 0
        }
        let now = engine.clock.date
        // In slices, so that a round of many (a partition gained, the first round after a rebuild
        // from the records) does not hold every record encoded at once.
        var failed: [ContentEngine.Unwritten] = []
        var lastError: (any Error)?
        var written = Set<Int32>()
        var next = taken.changes.startIndex
        while next < taken.changes.endIndex {
            let slice = taken.changes[next..<min(next + Self.slice, taken.changes.endIndex)]
            next = slice.endIndex
            let writable = self.writable
            var records: [(change: ContentEngine.Unwritten, value: [UInt8]?)] = []
            records.reserveCapacity(slice.count)
            for change in slice {
                // Its partition is another instance's now: its memories are handed back (dropped
                // unless this instance owns it again).
                guard writable.contains(change.partition) else {
                    failed.append(change)
                    continue
                }
                do {
                    records.append((change, try change.memory.map { memory in
                        try IsletJSON.encode(
                            ContentMemoryRecord(activity: memory.record(activityKey: change.activityKey, partition: change.partition), writtenAt: now))
                    }))
                } catch {
                    // Never expected; its partition's checkpoint waits all the same.
                    logger.error("activity memory not encoded", metadata: ["activity.key": "\(change.activityKey)", "error": "\(error)"])
                    failed.append(change)
                    lastError = error
                }
            }
            let (failedIndices, sliceError) = await send(records.map { ($0.change.activityKey, $0.value, $0.change.partition) })
            failed += failedIndices.map { records[$0].change }
            lastError = sliceError ?? lastError
            written.formUnion(records.map(\.change.partition))
        }
        var failedPartitions = Set(failed.map(\.partition))
        engine.unwrittenAgain(failed)
        // The checkpoint of each partition whose memories are all written: after memories of it
        // were written (the latest checkpoint must then be this one), or when the positions moved.
        let checkpointPositions = taken.positions.sorted { ($0.key.topic, $0.key.partition) < ($1.key.topic, $1.key.partition) }
            .map { ContentMemoryRecord.Position(topic: $0.key.topic, partition: $0.key.partition, offset: $0.value) }
        for partition in owned.subtracting(failedPartitions).sorted()
        where written.contains(partition) || state.withLock({ $0.checkpoints[partition] }) != taken.positions {
            guard writable.contains(partition) else { continue }
            do {
                let record = ContentMemoryRecord(checkpoint: .init(partition: partition, positions: checkpointPositions), writtenAt: now)
                _ = try await producer.send(topic: topic, key: ContentMemoryRecord.checkpointKey, value: try IsletJSON.encode(record), headers: [], partition: partition)
                state.withLock { $0.checkpoints[partition] = taken.positions }
            } catch {
                lastError = error
                failedPartitions.insert(partition)
            }
        }
        let count = taken.changes.count - failed.count
        Counter(label: "islet_content_changelog_records_total").increment(by: count)
        if let lastError {
            Counter(label: "islet_content_changelog_failures_total").increment()
            fail("\(failed.count) memories and the checkpoints of partitions \(failedPartitions.sorted()) not written: \(lastError)")
        } else {
            state.withLock { $0.failure = nil }
        }
        return count
    }

    /// Sends the records at once (the producer's awaited send, one child task each) and waits
    /// for their acknowledgements. Returns the indices of those Kafka did not take, and the last error.
    private func send(_ records: [(key: String, value: [UInt8]?, partition: Int32)]) async -> ([Int], (any Error)?) {
        let (producer, topic) = (self.producer, self.topic)
        return await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (index, record) in records.enumerated() {
                group.addTask {
                    do {
                        _ = try await producer.send(topic: topic, key: record.key, value: record.value, headers: [], partition: record.partition)
                        return (index, nil)
                    } catch {
                        return (index, error)
                    }
                }
            }
            var failed: ([Int], (any Error)?) = ([], nil)
            for await (index, error) in group where error != nil {
                failed.0.append(index)
                failed.1 = error
            }
            return failed
        }
    }

    private func fail(_ reason: String) {
        state.withLock { $0.failure = reason }
        logger.warning("changelog round incomplete; the next round writes the rest", metadata: ["reason": "\(reason)"])
    }
}
