import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Keeps ``PartitionTokens`` equal to the partitions of `islet.tokens.v1` the service owns.
///
/// A service whose consumer-group member is assigned partitions of a co-partitioned topic calls
/// ``restore(partitions:)``: a replica of the same partitions of the token topic is started,
/// read from their start, and the call returns once each was read to its end (the tokens the
/// partitions' requests need are there) or ``restoreTimeout`` passed. The replica goes on
/// following them while they are owned. ``revoke(partitions:)`` stops that and forgets their
/// tokens. Restore time is proportional to the tokens of the partitions restored, not to the
/// whole table, and each instance holds only its share.
///
/// The replicas run in ``run()``'s task group (a `Service`: started with the service, stopped on
/// graceful shutdown).
public final class PartitionTokenLoader: Service, Sendable {
    /// Makes the replica that reads these partitions of the token topic from their start.
    public typealias MakeReplica = @Sendable (_ partitions: [Int32]) throws -> KafkaConsumer

    private struct Follower {
        var consumer: KafkaConsumer
        /// The partitions it reads that are still owned.
        var live: Set<Int32>
        var restored = false
        /// Its wait is over without a restore (timed out, the replica stopped).
        var gaveUp = false
        /// Its replica stopped (it failed: the partitions are no longer followed).
        var ended = false
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private struct State {
        var followers: [UInt64: Follower] = [:]
        var next: UInt64 = 1
        var stopped = false
    }

    public let tokens: PartitionTokens
    /// How long ``restore(partitions:)`` waits for its partitions to be read (default 30 s): past
    /// it, the service goes on, and a request whose token is not read yet waits for it.
    public let restoreTimeout: Duration
    private let makeReplica: MakeReplica
    private let logger: Logger
    private let state = Mutex(State())
    private let started: AsyncStream<UInt64>.Continuation
    private let followers: AsyncStream<UInt64>
    private let restoreSeconds: Recorder
    private let tokensGauge: Gauge
    private let invalid: Counter

    /// - Parameter service: the service name, a dimension of the metrics.
    public init(
        tokens: PartitionTokens, service: String, restoreTimeout: Duration = .seconds(30), logger: Logger, makeReplica: @escaping MakeReplica
    ) {
        self.tokens = tokens
        self.restoreTimeout = restoreTimeout
        self.makeReplica = makeReplica
        self.logger = logger
        (followers, started) = AsyncStream.makeStream(of: UInt64.self)
        restoreSeconds = Recorder(label: "islet_tokens_restore_seconds", dimensions: [("service", service)])
        tokensGauge = Gauge(label: "islet_tokens_table_size", dimensions: [("service", service)])
        invalid = Counter(label: "islet_tokens_invalid_records_total", dimensions: [("service", service)])
    }

    /// The replica of `topic`'s `partitions` a loader reads: from their first record, fetching with
    /// the hot path's 10 ms wait (a token registered just before an activity's first request must
    /// be known when the request arrives).
    public static func replicaConfiguration(
        bootstrapServers: String, topic: String, partitions: [Int32], clientID: String, settings: [String: String]
    ) -> KafkaConsumerConfiguration {
        .replica(
            bootstrapServers: bootstrapServers, topics: [topic], partitions: partitions, clientID: clientID, fetchWait: .milliseconds(10),
            settings: settings)
    }

    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask {
                try? await gracefulShutdown()
                self.stop()
            }
            for await id in followers {
                guard let consumer = state.withLock({ $0.followers[id]?.consumer }) else { continue }
                group.addTask { await self.follow(id, consumer) }
            }
            group.cancelAll()
        }
    }

    /// Reads the token partitions matching `partitions` (assigned to the service just now) and
    /// returns once each was read to its end: `true`; `false` when ``restoreTimeout`` passed first,
    /// the partitions were revoked meanwhile, the replica could not be made, or the loader stopped.
    @discardableResult
    public func restore(partitions: [Int32]) async -> Bool {
        guard !partitions.isEmpty else { return true }
        tokens.own(partitions: partitions)
        let consumer: KafkaConsumer
        do {
            consumer = try makeReplica(partitions)
        } catch {
            logger.error("token partitions cannot be read", metadata: ["kafka.partitions": "\(partitions)", "error": "\(error)"])
            return false
        }
        let id = state.withLock { state -> UInt64? in
            guard !state.stopped else { return nil }
            let id = state.next
            state.next += 1
            state.followers[id] = Follower(consumer: consumer, live: Set(partitions))
            return id
        }
        guard let id else { return false }
        started.yield(id)
        let start = ContinuousClock.now
        let restored = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.waitRestored(id) }
            group.addTask {
                try? await Task.sleep(for: self.restoreTimeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            if !first { self.resume(id, false) }
            return first
        }
        let metadata: Logger.Metadata = [
            "kafka.partitions": "\(partitions.sorted())", "tokens.count": "\(tokens.count)",
            "restore.seconds": "\((ContinuousClock.now - start) / .seconds(1))",
        ]
        if restored {
            logger.info("token partitions restored", metadata: metadata)
        } else {
            logger.warning("token partitions not restored in time: their requests wait for tokens still being read", metadata: metadata)
        }
        return restored
    }

    /// Forgets these partitions' tokens and stops reading them.
    public func revoke(partitions: [Int32]) {
        tokens.drop(partitions: partitions)
        let revoked = Set(partitions)
        let (stopping, waiters) = state.withLock { state -> ([KafkaConsumer], [CheckedContinuation<Bool, Never>]) in
            var stopping: [KafkaConsumer] = []
            var waiters: [CheckedContinuation<Bool, Never>] = []
            for (id, var follower) in state.followers where !follower.live.isDisjoint(with: revoked) {
                follower.live.subtract(revoked)
                if follower.live.isEmpty {
                    stopping.append(follower.consumer)
                    if let waiter = follower.waiter { waiters.append(waiter) }
                    state.followers[id] = nil
                } else {
                    state.followers[id] = follower
                }
            }
            return (stopping, waiters)
        }
        for consumer in stopping { consumer.shutdown() }
        for waiter in waiters { waiter.resume(returning: false) }
        tokensGauge.record(Double(tokens.count))
    }

    /// What the replicas can do now: the worst of them (ready when none runs).
    public var health: KafkaClientHealth {
        let consumers = state.withLock { $0.followers.values.map(\.consumer) }
        var worst = KafkaClientHealth.ready
        for consumer in consumers {
            let health = consumer.health
            if health.status == .failed { return health }
            if health.status == .notReady { worst = health }
        }
        return worst
    }

    /// Whether a restore is under way (some owned partitions are not read to their end yet).
    public var isRestoring: Bool { state.withLock { $0.followers.values.contains { !$0.restored && !$0.ended } } }

    // MARK: Inside

    private func follow(_ id: UInt64, _ consumer: KafkaConsumer) async {
        do {
            try await consumer.replay { seconds in
                restoreSeconds.record(seconds)
                tokensGauge.record(Double(tokens.count))
                resume(id, true)
            } apply: { message, caughtUp in
                apply(message)
                if caughtUp { tokensGauge.record(Double(tokens.count)) }
            }
        } catch {
            logger.error("token partitions replica stopped", metadata: ["error": "\(error)"])
        }
        state.withLock { $0.followers[id]?.ended = true }
        resume(id, false)
    }

    private func apply(_ message: KafkaMessage) {
        do {
            switch try TokenTopicRecord(message) {
            case .record(let record, let key): tokens.apply(record, key: key, partition: message.partition, offset: message.offset)
            case .tombstone(let key): tokens.remove(key: key, partition: message.partition, offset: message.offset)
            }
        } catch {
            invalid.increment()
            logger.error(
                "token record not applied",
                metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }

    private func waitRestored(_ id: UInt64) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let answer = state.withLock { state -> Bool? in
                    guard var follower = state.followers[id] else { return false }
                    if follower.restored { return true }
                    if follower.gaveUp || Task.isCancelled { return false }
                    follower.waiter = continuation
                    state.followers[id] = follower
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            resume(id, false)
        }
    }

    /// Ends the wait for `id`'s restore (`restored`: it was read to its end).
    private func resume(_ id: UInt64, _ restored: Bool) {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard var follower = state.followers[id] else { return nil }
            if restored { follower.restored = true } else { follower.gaveUp = true }
            let waiter = follower.waiter
            follower.waiter = nil
            state.followers[id] = follower
            return waiter
        }
        waiter?.resume(returning: restored)
    }

    private func stop() {
        let (consumers, waiters) = state.withLock { state -> ([KafkaConsumer], [CheckedContinuation<Bool, Never>]) in
            state.stopped = true
            let followers = Array(state.followers.values)
            state.followers = [:]
            return (followers.map(\.consumer), followers.compactMap(\.waiter))
        }
        started.finish()
        for consumer in consumers { consumer.shutdown() }
        for waiter in waiters { waiter.resume(returning: false) }
    }
}
