import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Rebuilds and keeps up the engine's per-activity memory.
///
/// 1. **The changelog** (`islet.content-memory.v1`, written by ``ChangelogWriter``), read to its
///    end: the latest memory of each activity, and each partition's checkpoint.
/// 2. **The records after the checkpoints**: the service's own output (`islet.push-requests.v1`:
///    sequences, timestamps, states, alerts, the latest content) and the dispatcher's answers
///    (`islet.push-outcomes.v1`), read as a replica of every partition from the positions the
///    checkpoints name (the oldest of them, per partition: every memory is then caught up), and
///    followed from there. When a changelog partition has no checkpoint (a first start, a topic
///    just created), from `since` instead (the activities' retention), as without a changelog.
///
/// Once every partition was read to its end the first time, `onReady` is called: the event loop
/// may start, and an event already handled before a restart is then recognised as such. A request
/// this process wrote itself (its ``RequestSender/writer`` header) is skipped without decoding:
/// the engine committed it when it sent it, and replaying it would change nothing (a memory never
/// moves back to an older timestamp). Where the replica is (``ReadPositions``) is what the next
/// checkpoint says.
public final class ContentMemoryLoader: Service, Sendable {
    /// Makes a replica of `topics`, from `since` (`nil`: their first records), except in the
    /// partitions `startAt` names, which it starts at the offsets given.
    public typealias MakeReplica = @Sendable (_ topics: [String], _ since: Date?, _ startAt: [KafkaTopicPartition: Int64]) throws -> KafkaConsumer

    let makeReplica: MakeReplica
    let engine: ContentEngine
    let requestsTopic: String
    let outcomesTopic: String
    /// `nil`: no changelog, the records are read from `since`.
    let changelogTopic: String?
    let since: Date
    let ownWrites: KafkaHeader?
    public let positions: ReadPositions
    let onReady: @Sendable () -> Void
    let logger: Logger
    private let replica = Mutex<KafkaConsumer?>(nil)
    private let phase = Mutex("reading the changelog")
    /// The activity topics' partition count, once the changelog (co-partitioned with them) told it.
    private let activityPartitions = Mutex<Int32?>(nil)

    public init(
        engine: ContentEngine, requestsTopic: String = IsletTopics.pushRequests.name, outcomesTopic: String = IsletTopics.pushOutcomes.name,
        changelogTopic: String? = IsletTopics.contentMemory.name, since: Date, ownWrites: KafkaHeader? = nil, positions: ReadPositions = ReadPositions(),
        logger: Logger, makeReplica: @escaping MakeReplica, onReady: @escaping @Sendable () -> Void = {}
    ) {
        self.makeReplica = makeReplica
        self.engine = engine
        self.requestsTopic = requestsTopic
        self.outcomesTopic = outcomesTopic
        self.changelogTopic = changelogTopic
        self.since = since
        self.ownWrites = ownWrites
        self.positions = positions
        self.logger = logger
        self.onReady = onReady
    }

    /// The current replica's health (ready before one runs: the changelog read says nothing of Kafka).
    public var health: KafkaClientHealth { replica.withLock { $0 }?.health ?? .ready }

    public func run() async throws {
        let started = ContinuousClock.now
        var startAt: [KafkaTopicPartition: Int64] = [:]
        var changelogSeconds = 0.0
        if let changelogTopic {
            guard let restored = await readChangelogRetrying(changelogTopic) else { return }  // stopped meanwhile
            changelogSeconds = (ContinuousClock.now - started) / .seconds(1)
            startAt = restored.startAt
            if !restored.partitions.isEmpty { learn(activityPartitions: Int32(restored.partitions.count)) }
            logger.info(
                "activity memory read from the changelog",
                metadata: [
                    "memories": "\(restored.memories)", "activities": "\(engine.activityCount)", "changelog.partitions": "\(restored.partitions.count)",
                    "checkpoints": "\(restored.checkpoints)", "read.from": "\(startAt.isEmpty ? "the retention's start" : "the checkpoints")",
                    "changelog.seconds": "\(changelogSeconds)",
                ])
        }
        positions.start(at: startAt)
        phase.withLock { $0 = "reading the records after the checkpoints" }
        let consumer = try makeReplica([requestsTopic, outcomesTopic], since, startAt)
        replica.withLock { $0 = consumer }
        var records = 0
        try await consumer.replay(topics: [requestsTopic, outcomesTopic]) { [self] _ in
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            Gauge(label: "islet_content_memory_rebuild_seconds").record(seconds)
            logger.info(
                "activity memory rebuilt",
                metadata: [
                    "records": "\(records)", "activities": "\(engine.activityCount)", "rebuild.seconds": "\(seconds)",
                    "changelog.seconds": "\(changelogSeconds)",
                ])
            onReady()
        } apply: { [self] message, _ in
            records += 1
            apply(message)
            positions.applied(message)
        }
    }

    /// The activity topics have `count` partitions (the changelog's).
    func learn(activityPartitions count: Int32) { activityPartitions.withLock { $0 = count } }

    /// What the changelog gave.
    struct Restored {
        var memories = 0
        var checkpoints = 0
        var partitions: Set<Int32> = []
        /// Where to read the requests and outcomes from (empty: from `since`).
        var startAt: [KafkaTopicPartition: Int64] = [:]
    }

    /// Reads the changelog to its end into the engine; `nil` when the loader was stopped first.
    /// A changelog topic that does not exist is logged, and the memory is rebuilt from the records
    /// alone; a read that fails otherwise (the cluster unreachable) is tried again, after a
    /// backoff of 1 s doubling to 30 s: a rebuild from 9 hours of records is not a fallback for a
    /// blip.
    func readChangelogRetrying(_ topic: String) async -> Restored? {
        var backoff = Duration.seconds(1)
        while !Task.isCancelled {
            switch await readChangelog(topic) {
            case .restored(let restored): return restored
            case .stopped: return nil
            case .missing(let error):
                logger.error(
                    "the changelog topic does not exist: the memory is rebuilt from the requests and outcomes of the retention",
                    metadata: ["kafka.topic": "\(topic)", "error": "\(error)"])
                return Restored()
            case .failed(let error):
                phase.withLock { $0 = "reading the changelog failed (\(error)); again in \(backoff)" }
                logger.error("the changelog could not be read; reading it again after a backoff", metadata: ["error": "\(error)", "backoff": "\(backoff)"])
                guard (try? await Task.sleep(for: backoff)) != nil else { return nil }
                backoff = min(backoff * 2, .seconds(30))
            }
        }
        return nil
    }

    enum ChangelogRead {
        case restored(Restored)
        case missing(String)
        case failed(String)
        case stopped
    }

    func readChangelog(_ topic: String) async -> ChangelogRead {
        func failure(_ error: any Error) -> ChangelogRead {
            "\(error)".contains("does not exist") ? .missing("\(error)") : .failed("\(error)")
        }
        let reader: KafkaConsumer
        do {
            reader = try makeReplica([topic], nil, [:])
        } catch {
            return failure(error)
        }
        replica.withLock { $0 = reader }
        let engine = self.engine
        let logger = self.logger
        return await withTaskGroup(of: ChangelogRead?.self) { group in
            group.addTask {
                do {
                    try await reader.run()
                } catch {
                    return failure(error)
                }
                return nil
            }
            group.addTask {
                var catchUp = ReplicaCatchUp(topics: [topic])
                var restored = Restored()
                var checkpoints: [Int32: [KafkaTopicPartition: Int64]] = [:]
                for await event in reader.events {
                    if case .message(let message) = event {
                        Self.apply(changelog: message, to: engine, checkpoints: &checkpoints, restored: &restored, logger: logger)
                    }
                    if catchUp.note(event) {
                        reader.shutdown()
                        restored.partitions = Set(catchUp.assignedPartitions.map(\.partition))
                        restored.checkpoints = checkpoints.count
                        restored.startAt = Self.startPositions(checkpoints, partitions: restored.partitions)
                        return .restored(restored)
                    }
                }
                return nil
            }
            var answer: ChangelogRead?
            while let next = await group.next() {
                if let next, answer == nil {
                    answer = next
                    reader.shutdown()
                }
            }
            // Both ended without an answer: the reader was shut down (the loader stopping).
            return answer ?? .stopped
        }
    }

    static func apply(
        changelog message: KafkaMessage, to engine: ContentEngine, checkpoints: inout [Int32: [KafkaTopicPartition: Int64]],
        restored: inout Restored, logger: Logger
    ) {
        guard let value = message.value else {
            // A tombstone: the activity was forgotten, or the partition's checkpoint deleted (an
            // operator's way to have the memory rebuilt from the requests and outcomes).
            guard let key = message.keyString else { return }
            if key == ContentMemoryRecord.checkpointKey { checkpoints[message.partition] = nil } else { engine.restore(key, nil) }
            return
        }
        do {
            let record = try IsletJSON.decode(ContentMemoryRecord.self, from: value)
            if let activity = record.activity {
                engine.restore(MessageKey.activity(bundleId: activity.bundleId, activityId: activity.activityId), ActivityMemory(activity))
                restored.memories += 1
            } else if let checkpoint = record.checkpoint {
                checkpoints[message.partition] = Dictionary(
                    checkpoint.positions.compactMap { position in
                        position.topic.map { (KafkaTopicPartition(topic: $0, partition: position.partition), position.offset) }
                    },
                    uniquingKeysWith: min)
            }
        } catch {
            Counter(label: "islet_content_memory_invalid_records_total").increment()
            logger.error("changelog record ignored", metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }

    /// Where the replica of requests and outcomes starts: in each of their partitions, the oldest
    /// position the checkpoints name, so that every memory restored catches up. None (read from
    /// `since`) unless every changelog partition has a checkpoint; a partition a checkpoint does
    /// not name is read from `since` too.
    static func startPositions(_ checkpoints: [Int32: [KafkaTopicPartition: Int64]], partitions: Set<Int32>) -> [KafkaTopicPartition: Int64] {
        guard !partitions.isEmpty, partitions.allSatisfy({ checkpoints[$0] != nil }) else { return [:] }
        let named = checkpoints.values.reduce(into: Set<KafkaTopicPartition>()) { $0.formUnion($1.keys) }
        var start: [KafkaTopicPartition: Int64] = [:]
        for partition in named {
            let offsets = checkpoints.values.map { $0[partition] }
            guard offsets.allSatisfy({ $0 != nil }) else { continue }
            start[partition] = offsets.compactMap { $0 }.min()
        }
        return start
    }

    func apply(_ message: KafkaMessage) {
        do {
            if message.topic == requestsTopic {
                if let ownWrites, message.header(ownWrites.name) == ownWrites {
                    Counter(label: "islet_content_memory_own_requests_skipped_total").increment()
                    return
                }
                let request = try IsletJSON.decode(PushRequest.self, from: message.value ?? [])
                // A push-to-start request is keyed (and partitioned) by its push-to-start key: its
                // activity's partition is where the activity id goes.
                let partition: Int32?
                if request.activityId != nil {
                    partition = message.partition
                } else if let activityId = request.sourceActivityId, let count = activityPartitions.withLock({ $0 }) {
                    partition = KafkaPartitioner.partition(ofKey: activityId, partitions: count)
                } else {
                    partition = nil
                }
                engine.replay(request, partition: partition, storedAt: message.position)
            } else if message.topic == outcomesTopic {
                engine.record(try IsletJSON.decode(PushOutcome.self, from: message.value ?? []))
            }
        } catch {
            // Written by Islet's own services: a record that does not decode is a bug, not input to guess at.
            Counter(label: "islet_content_memory_invalid_records_total").increment()
            logger.error("record ignored", metadata: ["kafka.topic": "\(message.topic)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }
}
