import Foundation
import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle
import Synchronization

/// Keeps the engine's per-activity memory of the partitions this instance owns, Kafka Streams
/// style: the memory of a partition lives where the partition's events are handled.
///
/// - **At start** the loader reads nothing but where `islet.push-requests.v1` and
///   `islet.push-outcomes.v1` end, and follows them from there as a replica (every partition:
///   a push-to-start's request and outcome sit in its push-to-start key's partition, not in its
///   activity's). It applies only the records of activities whose partition is restored here. Once
///   it has reached their ends, `onReady` is called: the event loop may join its group.
/// - **On assignment** (``restore(_:)``, before the partition's first event): the partition of the
///   changelog (`islet.content-memory.v1`, written by ``ChangelogWriter``) is read to its end —
///   the latest memory of each of its activities and its checkpoint — then the requests and
///   outcomes from the positions the checkpoint names (the last `since` when it has none) to their
///   end, applying that partition's records only. The follower applies the partition's records
///   from the moment its restore begins, so nothing falls between; a record applied twice changes
///   nothing (a memory never moves back to an older timestamp; an outcome is kept once).
/// - **On revocation** (``revoked(_:)``) the memories are kept until the next assignment: in an
///   eager rebalance a partition usually comes back, and nobody else has handled it meanwhile.
///   Those that do not come back are forgotten (``ContentEngine/forget(partitions:)``).
///
/// A request this process wrote itself (its ``RequestSender/writer`` header) is skipped by the
/// follower without decoding: the engine committed it when it sent it. Where the follower is
/// (``ReadPositions``) is what the next checkpoint says.
public final class ContentMemoryLoader: Service, Sendable {
    /// The start of a widget push's key (``MessageKey/widget(bundleId:deviceId:kind:)``).
    static let widgetKeyPrefix = Array("wgt:".utf8)

    /// Makes a replica of `topics` (of their `partitions` only, when given), from `since`
    /// (`nil`: their first records), except in the partitions `startAt` names, which it starts
    /// at the offsets given.
    public typealias MakeReplica = @Sendable (
        _ topics: [String], _ since: Date?, _ startAt: [KafkaTopicPartition: Int64], _ partitions: [Int32]?
    ) throws -> any MessageSource
    /// Where each partition of `topics` ends now (the next offset to be written).
    public typealias ReadEnds = @Sendable (_ topics: [String]) async throws -> [KafkaTopicPartition: Int64]

    let makeReplica: MakeReplica
    let readEnds: ReadEnds?
    let engine: ContentEngine
    let requestsTopic: String
    let outcomesTopic: String
    let changelogTopic: String
    let since: Date
    let ownWrites: KafkaHeader?
    public let positions: ReadPositions
    let onReady: @Sendable () -> Void
    let metrics: ContentMetrics
    let logger: Logger
    private let follower = Mutex<(any MessageSource)?>(nil)
    /// The partitions whose activities' records the follower applies: restored (or being
    /// restored) here, and assigned — or revoked and kept until the next assignment.
    private let held = Mutex<Set<Int32>>([])
    /// Revoked, kept until the next assignment says whether they come back.
    private let kept = Mutex<Set<Int32>>([])
    /// The activity topics' partition count, once the ends (or, in tests, a caller) told it.
    private let activityPartitions = Mutex<Int32?>(nil)

    /// - Parameter readEnds: where the requests and outcomes end; `nil` (tests that never run the
    ///   loader): the follower starts at `since`.
    public init(
        engine: ContentEngine, requestsTopic: String = IsletTopics.pushRequests.name, outcomesTopic: String = IsletTopics.pushOutcomes.name,
        changelogTopic: String = IsletTopics.contentMemory.name, since: Date, ownWrites: KafkaHeader? = nil, positions: ReadPositions = ReadPositions(),
        metrics: ContentMetrics, logger: Logger, readEnds: ReadEnds? = nil, makeReplica: @escaping MakeReplica, onReady: @escaping @Sendable () -> Void = {}
    ) {
        self.makeReplica = makeReplica
        self.readEnds = readEnds
        self.engine = engine
        self.requestsTopic = requestsTopic
        self.outcomesTopic = outcomesTopic
        self.changelogTopic = changelogTopic
        self.since = since
        self.ownWrites = ownWrites
        self.positions = positions
        self.metrics = metrics
        self.logger = logger
        self.onReady = onReady
    }

    /// Reads the ends through a Kafka admin client made for each call.
    public static func ends(bootstrapServers: String, clientID: String, settings: [String: String], logger: Logger) -> ReadEnds {
        { topics in
            let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrapServers, clientID: clientID, settings: settings), logger: logger)
            var ends: [KafkaTopicPartition: Int64] = [:]
            for topic in topics {
                guard let count = try await admin.partitionCount(of: topic) else {
                    throw KafkaError(code: .admin, message: "topic \(topic) does not exist")
                }
                for partition in Int32(0)..<Int32(count) {
                    ends[KafkaTopicPartition(topic: topic, partition: partition)] = try await admin.watermarks(topic: topic, partition: partition).high
                }
            }
            return ends
        }
    }

    /// Makes replica consumers with Islet's defaults and `settings`.
    public static func replicas(bootstrapServers: String, clientID: String, settings: [String: String], logger: Logger) -> MakeReplica {
        { topics, since, startAt, partitions in
            var configuration = KafkaConsumerConfiguration.replica(
                bootstrapServers: bootstrapServers, topics: topics, since: since, clientID: clientID, settings: settings)
            configuration.replicaStartPositions = startAt
            configuration.replicaPartitions = partitions
            return try KafkaConsumer(configuration: configuration, logger: logger)
        }
    }

    /// The follower's health (ready before it runs).
    public var health: KafkaClientHealth { follower.withLock { $0 }?.health ?? .ready }

    /// The partitions whose memories this instance holds.
    public var heldPartitions: Set<Int32> { held.withLock { $0 } }

    public func run() async throws {
        let started = ContinuousClock.now
        let topics = [requestsTopic, outcomesTopic]
        var startAt: [KafkaTopicPartition: Int64] = [:]
        if let readEnds {
            guard let ends = await retrying("reading where the requests and outcomes end", { try await readEnds(topics) }) else { return }
            startAt = ends
            let count = ends.keys.filter { $0.topic == requestsTopic }.count
            if count > 0 { learn(activityPartitions: Int32(count)) }
        }
        positions.start(at: startAt)
        let consumer = try makeReplica(topics, since, startAt, nil)
        follower.withLock { $0 = consumer }
        try await consumer.replay(topics: Set(topics)) { [self] seconds in
            logger.info("following the requests and outcomes from their ends", metadata: ["seconds": "\((ContinuousClock.now - started) / .seconds(1))"])
            onReady()
        } apply: { [self] message, _ in
            apply(message, only: held.withLock { $0 }, skipOwnWrites: true)
            positions.applied(message)
        }
    }

    /// The activity topics have `count` partitions.
    func learn(activityPartitions count: Int32) { activityPartitions.withLock { $0 = count } }

    /// The partition count of the activity topics, once known (the loader learns it when it starts).
    public var activityPartitionCount: Int32? { activityPartitions.withLock { $0 } }

    /// The event loop was assigned `partitions` (before it handles any of their events): the
    /// memories of those not held are read (their changelog partition, then the requests and
    /// outcomes after its checkpoint); those revoked and not assigned again are forgotten.
    /// Returns the partitions read once they are restored (none when every one was held
    /// already), or `nil` when the loader stopped first.
    @discardableResult
    public func restore(_ partitions: Set<Int32>) async -> Set<Int32>? {
        let gone = kept.withLock { kept in
            defer { kept = [] }
            return kept.subtracting(partitions)
        }
        if !gone.isEmpty {
            held.withLock { $0.subtract(gone) }
            let forgotten = engine.forget(partitions: gone)
            logger.info(
                "memories of partitions gone to another instance forgotten",
                metadata: ["kafka.partitions": "\(gone.sorted())", "memories": "\(forgotten)", "activities": "\(engine.activityCount)"])
        }
        let missing = partitions.subtracting(held.withLock { $0 })
        guard !missing.isEmpty else { return [] }
        // The follower applies their records from now on; the restore below covers what came before.
        held.withLock { $0.formUnion(missing) }
        let started = ContinuousClock.now
        guard let changelog = await retrying("reading the changelog", { try await self.readChangelog(missing) }) else { return nil }
        let changelogSeconds = (ContinuousClock.now - started) / .seconds(1)
        let startAt = Self.startPositions(changelog.checkpoints, partitions: missing)
        guard let records = await retrying("reading the requests and outcomes after the checkpoint", { try await self.catchUp(missing, from: startAt) }) else {
            return nil
        }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        metrics.memoryRestored(seconds: seconds, memories: changelog.memories)
        logger.info(
            "partitions restored",
            metadata: [
                "kafka.partitions": "\(missing.sorted())", "memories": "\(changelog.memories)", "checkpoints": "\(changelog.checkpoints.count)",
                "records": "\(records)", "read.from": "\(startAt.isEmpty ? "the retention's start" : "the checkpoints")",
                "changelog.seconds": "\(changelogSeconds)", "restore.seconds": "\(seconds)", "activities": "\(engine.activityCount)",
            ])
        return missing
    }

    /// The event loop's `partitions` were revoked (their memories are in the changelog): kept
    /// until the next assignment, which usually gives them back.
    public func revoked(_ partitions: Set<Int32>) {
        kept.withLock { $0.formUnion(partitions) }
    }

    /// What a partition's changelog gave.
    struct Changelog {
        var memories = 0
        var checkpoints: [Int32: [KafkaTopicPartition: Int64]] = [:]
    }

    /// Runs `read` until it succeeds, after a backoff of 1 s doubling to 30 s; `nil` when the
    /// loader was cancelled first. A missing changelog topic is not retried: the memory is then
    /// rebuilt from the requests and outcomes alone.
    private func retrying<T: Sendable>(_ what: String, _ read: @Sendable () async throws -> T) async -> T? {
        var backoff = Duration.seconds(1)
        while !Task.isCancelled {
            do {
                return try await read()
            } catch is CancellationError {
                return nil
            } catch {
                logger.error("\(what) failed; again after a backoff", metadata: ["error": "\(error)", "backoff": "\(backoff)"])
                guard (try? await Task.sleep(for: backoff)) != nil else { return nil }
                backoff = min(backoff * 2, .seconds(30))
            }
        }
        return nil
    }

    func readChangelog(_ partitions: Set<Int32>) async throws -> Changelog {
        var changelog = Changelog()
        do {
            try await readToEnd([changelogTopic], partitions: partitions.sorted(), since: nil, startAt: [:]) { [engine, metrics, logger] message in
                Self.apply(
                    changelog: message, to: engine, checkpoints: &changelog.checkpoints, memories: &changelog.memories, metrics: metrics, logger: logger)
            }
        } catch where "\(error)".contains("does not exist") {
            logger.error(
                "the changelog topic does not exist: the memory is rebuilt from the requests and outcomes of the retention",
                metadata: ["kafka.topic": "\(changelogTopic)", "error": "\(error)"])
            return Changelog()
        }
        return changelog
    }

    /// Reads the requests and outcomes from `startAt` (the partitions it does not name, from
    /// `since`) to their ends, applying the records of `partitions`' activities; returns how many.
    func catchUp(_ partitions: Set<Int32>, from startAt: [KafkaTopicPartition: Int64]) async throws -> Int {
        var records = 0
        // (A partition revoked meanwhile stays held until the next assignment, which the event
        // loop hands to ``restore(_:)`` once this one returned.)
        try await readToEnd([requestsTopic, outcomesTopic], partitions: nil, since: since, startAt: startAt) { [self] message in
            if apply(message, only: partitions, skipOwnWrites: false) { records += 1 }
        }
        return records
    }

    /// Reads `topics` as a replica until every partition was read to its end, handing each record to `apply`.
    private func readToEnd(
        _ topics: [String], partitions: [Int32]?, since: Date?, startAt: [KafkaTopicPartition: Int64], apply: (KafkaMessage) -> Void
    ) async throws {
        let reader = try makeReplica(topics, since, startAt, partitions)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await reader.run() }
            var catchUp = ReplicaCatchUp(topics: Set(topics))
            var done = false
            for await event in reader.events {
                if case .message(let message) = event { apply(message) }
                if catchUp.note(event) {
                    done = true
                    break
                }
            }
            reader.shutdown()
            try await group.waitForAll()
            if !done {
                if Task.isCancelled { throw CancellationError() }
                throw KafkaError(code: .shutdown, message: "the replica of \(topics) stopped before their ends")
            }
        }
    }

    static func apply(
        changelog message: KafkaMessage, to engine: ContentEngine, checkpoints: inout [Int32: [KafkaTopicPartition: Int64]],
        memories: inout Int, metrics: ContentMetrics, logger: Logger
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
                memories += 1
            } else if let checkpoint = record.checkpoint {
                checkpoints[message.partition] = Dictionary(
                    checkpoint.positions.compactMap { position in
                        position.topic.map { (KafkaTopicPartition(topic: $0, partition: position.partition), position.offset) }
                    },
                    uniquingKeysWith: min)
            }
        } catch {
            metrics.memoryRecordInvalid()
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

    /// Applies a request or outcome to the memory of its activity when the activity's partition
    /// is in `only` (`nil`: any); `true` when it was applied.
    @discardableResult
    func apply(_ message: KafkaMessage, only partitions: Set<Int32>? = nil, skipOwnWrites: Bool = true) -> Bool {
        guard partitions?.isEmpty != true else { return false }
        do {
            if message.topic == requestsTopic {
                if skipOwnWrites, let ownWrites, message.header(ownWrites.name) == ownWrites {
                    metrics.ownRequestSkipped()
                    return false
                }
                let count = activityPartitions.withLock { $0 }
                // A request to a running activity is in its activity's partition: not decoded when
                // that partition is not held here. (A push-to-start key, `pts:…`, has colons; an
                // activity's key never does.)
                if let partitions, message.key?.contains(UInt8(ascii: ":")) != true, !partitions.contains(message.partition) {
                    return false
                }
                // A widget push (`wgt:…`) makes no memory of its activity: not decoded.
                if let key = message.key, key.starts(with: Self.widgetKeyPrefix) { return false }
                let request = try IsletJSON.decode(PushRequest.self, from: message.value ?? [])
                // A push-to-start request is keyed (and partitioned) by its push-to-start key: its
                // activity's partition is where the activity id goes.
                let partition: Int32?
                if request.activityId != nil {
                    partition = message.partition
                } else if let activityId = request.sourceActivityId, let count {
                    partition = KafkaPartitioner.partition(ofKey: activityId, partitions: count)
                } else {
                    partition = nil
                }
                if let partitions, !(partition.map(partitions.contains) ?? false) { return false }
                engine.replay(request, partition: partition, storedAt: message.position)
            } else if message.topic == outcomesTopic {
                let outcome = try IsletJSON.decode(PushOutcome.self, from: message.value ?? [])
                // A push-to-start's outcome names no activity: it goes to the activity its
                // request started, which is remembered only where that activity's partition is.
                if let partitions, let activityId = outcome.activityId, let count = activityPartitions.withLock({ $0 }),
                    !partitions.contains(KafkaPartitioner.partition(ofKey: activityId, partitions: count))
                {
                    return false
                }
                engine.record(outcome, at: message.position)
            } else {
                return false
            }
            return true
        } catch {
            // Written by Islet's own services: a record that does not decode is a bug, not input to guess at.
            metrics.memoryRecordInvalid()
            logger.error("record ignored", metadata: ["kafka.topic": "\(message.topic)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
            return false
        }
    }
}
