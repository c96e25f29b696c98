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

/// content-service's changelog: a ``ChangelogWriter`` of ``ContentChanges``.
public typealias ContentChangelog = ChangelogWriter<ContentChanges>

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
            return (current, engine.takeUnwritten(partitions: partitions))
        }
        guard let taken = taken ?? nil else {
            throw ChangelogRoundRefused("the requests sent were not all acknowledged within \(settleTimeout): the changelog waits for the next round")
        }
        return taken
    }

    public func partition(of change: ContentEngine.Unwritten) -> Int32 { change.partition }

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

extension ChangelogWriter where Source == ContentChanges {
    /// Writes content-service's changelog, `islet.content-memory.v1` (docs/topics.md), every
    /// `interval` and when partitions are revoked; rounds run one at a time. A round waits at most
    /// `settleTimeout` for the requests sent to be acknowledged before it gives up.
    public convenience init(
        engine: ContentEngine, sender: RequestSender, producer: any MessageSink, positions: ReadPositions,
        topic: String = IsletTopics.contentMemory.name, interval: Duration = .seconds(5), settleTimeout: Duration = .seconds(5), logger: Logger
    ) {
        self.init(
            source: ContentChanges(engine: engine, sender: sender, positions: positions, settleTimeout: settleTimeout), producer: producer,
            topic: topic, interval: interval, slice: 10_000, oneAtATime: true, name: "changelog", metrics: "islet_content_changelog", logger: logger)
    }
}
