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
/// following them while they are owned. Restore time is proportional to the tokens of the
/// partitions restored, not to the whole table, and each instance holds only its share.
///
/// ``revoke(partitions:)`` *parks* the partitions: their tokens stay, and are still followed,
/// until the next assignment says whether they came back. A rebalance under Kafka's eager protocol
/// revokes every partition of every member and assigns most of them back to the same member at
/// once: the tokens of those are not read again, only those of the partitions that moved. Parked
/// partitions that did not come back are dropped (and their replica stopped) then.
///
/// The replicas run in ``run()``'s task group (a `Service`: started with the service, stopped on
/// graceful shutdown).
public final class PartitionTokenLoader: Service, Sendable {
    /// Makes the replica that reads these partitions of the token topic from their start.
    public typealias MakeReplica = @Sendable (_ partitions: [Int32]) throws -> KafkaConsumer

    private struct Follower {
        var consumer: KafkaConsumer
        /// The partitions it reads that are still held (owned or parked).
        var live: Set<Int32>
        /// Read to the end once.
        var restored = false
        /// Its replica stopped (failed, or the loader stopped): the partitions are not followed.
        var ended = false
        var waiter: CheckedContinuation<Bool, Never>?
    }

    private struct State {
        var followers: [UInt64: Follower] = [:]
        /// Revoked, kept until the next assignment.
        var parked: Set<Int32> = []
        var next: UInt64 = 1
        var stopped = false

        var followed: Set<Int32> { followers.values.reduce(into: []) { $0.formUnion($1.live) } }

        /// Stops holding `partitions`: returns the replicas left with nothing to follow and the
        /// restores waiting for them.
        mutating func release(_ partitions: Set<Int32>) -> (stop: [KafkaConsumer], waiters: [CheckedContinuation<Bool, Never>]) {
            var stop: [KafkaConsumer] = []
            var waiters: [CheckedContinuation<Bool, Never>] = []
            for (id, var follower) in followers where !follower.live.isDisjoint(with: partitions) {
                follower.live.subtract(partitions)
                if follower.live.isEmpty {
                    stop.append(follower.consumer)
                    if let waiter = follower.waiter { waiters.append(waiter) }
                    followers[id] = nil
                } else {
                    followers[id] = follower
                }
            }
            return (stop, waiters)
        }
    }

    public let tokens: PartitionTokens
    /// How long ``restore(partitions:)`` waits for its partitions to be read (default 30 s): past
    /// it, the service goes on, and a request whose token is not read yet waits for it (the
    /// restore goes on too; `/health` says so until it is done).
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

    /// The service was assigned `partitions`: the parked ones among them are kept, the other parked
    /// ones dropped, and those not held yet read from their start. Returns once every assigned
    /// partition was read to its end: `true`; `false` when ``restoreTimeout`` passed first, the
    /// partitions were revoked meanwhile, the replica could not be made, or the loader stopped.
    @discardableResult
    public func restore(partitions: [Int32]) async -> Bool {
        let assigned = Set(partitions)
        let (released, stop, waiters) = state.withLock { state in
            let released = state.parked.subtracting(assigned)
            state.parked = []
            let (stop, waiters) = state.release(released)
            return (released, stop, waiters)
        }
        finish(dropping: released, stop, waiters)
        guard !assigned.isEmpty else { return true }
        tokens.own(partitions: assigned)
        let missing = assigned.subtracting(state.withLock { $0.followed })
        if !missing.isEmpty {
            let consumer: KafkaConsumer
            do {
                consumer = try makeReplica(missing.sorted())
            } catch {
                logger.error("token partitions cannot be read", metadata: ["kafka.partitions": "\(missing.sorted())", "error": "\(error)"])
                return false
            }
            let id = state.withLock { state -> UInt64? in
                guard !state.stopped else { return nil }
                let id = state.next
                state.next += 1
                state.followers[id] = Follower(consumer: consumer, live: missing)
                return id
            }
            guard let id else { return false }
            started.yield(id)
        }
        // The restores still under way for these partitions (the new one, and any kept one).
        let awaited = state.withLock { state in state.followers.filter { !$0.value.live.isDisjoint(with: assigned) && !$0.value.restored }.map(\.key) }
        let start = ContinuousClock.now
        let restored = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for id in awaited { guard await self.waitRestored(id) else { return false } }
                return true
            }
            group.addTask {
                try? await Task.sleep(for: self.restoreTimeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            if !first { for id in awaited { self.wake(id) } }
            return first
        }
        let metadata: Logger.Metadata = [
            "kafka.partitions": "\(partitions.sorted())", "kafka.partitions.read": "\(missing.sorted())",
            "tokens.count": "\(tokens.count)", "restore.seconds": "\((ContinuousClock.now - start) / .seconds(1))",
        ]
        if restored {
            logger.info("token partitions restored", metadata: metadata)
        } else {
            logger.warning("token partitions not restored in time: their requests wait for tokens still being read", metadata: metadata)
        }
        return restored
    }

    /// These partitions were revoked: parked until the next assignment (``restore(partitions:)``)
    /// says whether they came back.
    public func revoke(partitions: [Int32]) {
        state.withLock { state in state.parked.formUnion(Set(partitions).intersection(state.followed)) }
    }

    private func finish(dropping partitions: Set<Int32>, _ stop: [KafkaConsumer], _ waiters: [CheckedContinuation<Bool, Never>]) {
        guard !partitions.isEmpty else { return }
        tokens.drop(partitions: partitions)
        for consumer in stop { consumer.shutdown() }
        for waiter in waiters { waiter.resume(returning: false) }
        tokensGauge.record(Double(tokens.count))
    }

    /// Partitions revoked and kept until the next assignment.
    public var parkedPartitions: Set<Int32> { state.withLock { $0.parked } }

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

    /// Whether a restore is under way (some held partitions are not read to their end yet).
    public var isRestoring: Bool { state.withLock { $0.followers.values.contains { !$0.restored && !$0.ended } } }

    // MARK: Inside

    private func follow(_ id: UInt64, _ consumer: KafkaConsumer) async {
        do {
            try await consumer.replay { seconds in
                restoreSeconds.record(seconds)
                tokensGauge.record(Double(tokens.count))
                let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                    state.followers[id]?.restored = true
                    defer { state.followers[id]?.waiter = nil }
                    return state.followers[id]?.waiter
                }
                waiter?.resume(returning: true)
            } apply: { message, caughtUp in
                apply(message)
                if caughtUp { tokensGauge.record(Double(tokens.count)) }
            }
        } catch {
            logger.error("token partitions replica stopped", metadata: ["error": "\(error)"])
        }
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.followers[id]?.ended = true
            defer { state.followers[id]?.waiter = nil }
            return state.followers[id]?.waiter
        }
        waiter?.resume(returning: false)
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

    /// Waits until `id` was read to its end (`true`), or its replica ended, it is gone, or the
    /// wait is woken (``wake(_:)``, cancellation): `false`.
    private func waitRestored(_ id: UInt64) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let answer = state.withLock { state -> Bool? in
                    guard let follower = state.followers[id], !follower.ended else { return false }
                    if follower.restored { return true }
                    if Task.isCancelled { return false }
                    state.followers[id]?.waiter = continuation
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            wake(id)
        }
    }

    /// Ends a wait for `id` with `false` (the restore goes on).
    private func wake(_ id: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            defer { state.followers[id]?.waiter = nil }
            return state.followers[id]?.waiter
        }
        waiter?.resume(returning: false)
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
