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
/// ``restore(partitions:)`` before it handles their records: a replica of the same partitions of
/// the token topic is started, read from their start, and the call returns once each was read to
/// its end, so that no request is looked at against a half-read partition (a token invalidated
/// at the end of the partition would still look active). The replica goes on following them while
/// they are held. Restore time is proportional to the tokens of the partitions restored, not to
/// the whole table, and each instance holds only its share. A replica that stops by itself (the
/// cluster unreachable when it starts, a failure) is started again, after a backoff.
///
/// ``revoke(partitions:)`` *parks* the partitions: their tokens stay, and are still followed,
/// until the next assignment says whether they came back. A rebalance under Kafka's eager protocol
/// revokes every partition of every member and assigns most of them back to the same member at
/// once: the tokens of those are not read again, only those of the partitions that moved. Parked
/// partitions that did not come back are dropped then; a replica stops once none of its
/// partitions is held (until then it also reads what is new in the dropped ones, and discards it).
///
/// The replicas run in ``run()``'s task group (a `Service`: started with the service, stopped on
/// graceful shutdown).
public final class PartitionTokenLoader: Service, Sendable {
    /// Makes the replica that reads these partitions of the token topic from their start.
    public typealias MakeReplica = @Sendable (_ partitions: [Int32]) throws -> any MessageSource

    private struct Follower {
        /// The partitions it reads that are still held (owned or parked).
        var live: Set<Int32>
        /// Its current replica, while one runs.
        var consumer: (any MessageSource)?
        /// Read to the end once.
        var restored = false
        /// Replicas in a row that stopped by themselves, and why the last one did.
        var failures = 0
        var lastError: String?
    }

    private struct State {
        var followers: [UInt64: Follower] = [:]
        /// Revoked, kept until the next assignment.
        var parked: Set<Int32> = []
        /// Partitions being revoked (``interrupt(partitions:)``) whose restore is not waited for.
        var interrupted: Set<Int32> = []
        /// Restores waiting for a change, by id.
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var next: UInt64 = 1
        var stopped = false

        var followed: Set<Int32> { followers.values.reduce(into: []) { $0.formUnion($1.live) } }

        /// Stops holding `partitions`: returns the replicas left with nothing to follow.
        mutating func release(_ partitions: Set<Int32>) -> [any MessageSource] {
            var stop: [any MessageSource] = []
            for (id, var follower) in followers where !follower.live.isDisjoint(with: partitions) {
                follower.live.subtract(partitions)
                if follower.live.isEmpty {
                    if let consumer = follower.consumer { stop.append(consumer) }
                    followers[id] = nil
                } else {
                    followers[id] = follower
                }
            }
            return stop
        }

        /// Takes every waiting restore, to be resumed (they look again).
        mutating func takeWaiters() -> [CheckedContinuation<Void, Never>] {
            defer { waiters = [:] }
            return Array(waiters.values)
        }

        /// The followers of these partitions not read to their end yet.
        func pending(_ partitions: Set<Int32>) -> [Follower] {
            followers.values.filter { !$0.restored && !$0.live.isDisjoint(with: partitions) }
        }
    }

    public let tokens: PartitionTokens
    /// How often a restore that takes long says so in the log (default 30 s).
    public let progressInterval: Duration
    private let makeReplica: MakeReplica
    private let logger: Logger
    private let state = Mutex(State())
    private let started: AsyncStream<UInt64>.Continuation
    private let followers: AsyncStream<UInt64>
    private let restoreSeconds: Recorder
    private let tokensGauge: Gauge
    private let applier: TokenRecordApplier
    private let otherRecords: (@Sendable (KafkaMessage) -> Bool)?

    /// - Parameter service: the service name, a dimension of the metrics.
    /// - Parameter otherRecords: for a replica that reads other co-partitioned topics beside the
    ///   tokens' (the dispatcher's budgets): takes a record of those (`true`) before it is taken
    ///   for a token's. Their partitions are restored together: read to their end before a
    ///   restore returns, then followed while held.
    public init(
        tokens: PartitionTokens, service: String, progressInterval: Duration = .seconds(30), logger: Logger,
        otherRecords: (@Sendable (KafkaMessage) -> Bool)? = nil, makeReplica: @escaping MakeReplica
    ) {
        self.otherRecords = otherRecords
        self.tokens = tokens
        self.progressInterval = progressInterval
        self.makeReplica = makeReplica
        self.logger = logger
        (followers, started) = AsyncStream.makeStream(of: UInt64.self)
        restoreSeconds = Recorder(label: "islet_tokens_restore_seconds", dimensions: [("service", service)])
        tokensGauge = Gauge(label: "islet_tokens_table_size", dimensions: [("service", service)])
        applier = TokenRecordApplier(service: service, logger: logger)
    }

    /// The replica of `topic`'s `partitions` a loader reads: from their first record, fetching with
    /// ``TokenTableLoader/fetchWait`` (soon after a token is registered, and fast when behind), and
    /// buffering at most 16 MB ahead of the decoding
    /// (librdkafka's default, 64 MB, would stay in the process after a restore) unless `settings`
    /// say otherwise.
    /// `alsoTopics`: other co-partitioned topics read with it (``init(tokens:service:progressInterval:logger:otherRecords:makeReplica:)``).
    public static func replicaConfiguration(
        bootstrapServers: String, topic: String, alsoTopics: [String] = [], partitions: [Int32], clientID: String, settings: [String: String]
    ) -> KafkaConsumerConfiguration {
        var settings = settings
        if settings["queued.max.messages.kbytes"] == nil { settings["queued.max.messages.kbytes"] = "16384" }
        return .replica(
            bootstrapServers: bootstrapServers, topics: [topic] + alsoTopics, partitions: partitions, clientID: clientID, fetchWait: TokenTableLoader.fetchWait,
            settings: settings)
    }

    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask {
                try? await gracefulShutdown()
                self.stop()
            }
            for await id in followers {
                group.addTask { await self.follow(id) }
            }
            group.cancelAll()
        }
    }

    /// The service was assigned `partitions`: the parked ones among them are kept, the other parked
    /// ones dropped, and those not held yet read from their start. Returns `true` once every
    /// assigned partition was read to its end; `false` when the loader stopped, or when the wait
    /// was cut short by ``interrupt(partitions:)`` for all of them or by cancellation.
    @discardableResult
    public func restore(partitions: [Int32]) async -> Bool {
        let assigned = Set(partitions)
        let (released, stop) = state.withLock { state in
            let released = state.parked.subtracting(assigned)
            state.parked = []
            state.interrupted = []
            return (released, state.release(released))
        }
        drop(released, stop)
        guard !assigned.isEmpty else { return true }
        tokens.own(partitions: assigned)
        let missing = state.withLock { state -> Set<Int32>? in
            guard !state.stopped else { return nil }
            let missing = assigned.subtracting(state.followed)
            if !missing.isEmpty {
                let id = state.next
                state.next += 1
                state.followers[id] = Follower(live: missing)
                started.yield(id)
            }
            return missing
        }
        guard let missing else { return false }
        let start = ContinuousClock.now
        let restored = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.waitRestored(assigned) }
            group.addTask {
                // Says so while it takes long; ends with the wait.
                while (try? await Task.sleep(for: self.progressInterval)) != nil {
                    self.logger.warning(
                        "still reading token partitions just assigned: their requests wait",
                        metadata: [
                            "kafka.partitions": "\(missing.sorted())", "tokens.count": "\(self.tokens.count)",
                            "waited.seconds": "\((ContinuousClock.now - start) / .seconds(1))", "health": "\(self.health)",
                        ])
                }
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
        let metadata: Logger.Metadata = [
            "kafka.partitions": "\(partitions.sorted())", "kafka.partitions.read": "\(missing.sorted())",
            "tokens.count": "\(tokens.count)", "restore.seconds": "\((ContinuousClock.now - start) / .seconds(1))",
        ]
        if restored {
            logger.info("token partitions restored", metadata: metadata)
        } else {
            logger.info("token partitions' restore no longer waited for (revoked or stopping)", metadata: metadata)
        }
        return restored
    }

    /// These partitions are being revoked (called from the consumer's revocation handler, before
    /// their revocation reaches the service's loop): a restore waiting for them stops waiting.
    public func interrupt(partitions: [Int32]) {
        let waiters = state.withLock { state in
            state.interrupted.formUnion(partitions)
            return state.takeWaiters()
        }
        for waiter in waiters { waiter.resume() }
    }

    /// These partitions were revoked: parked until the next assignment (``restore(partitions:)``)
    /// says whether they came back.
    public func revoke(partitions: [Int32]) {
        state.withLock { state in state.parked.formUnion(Set(partitions).intersection(state.followed)) }
    }

    /// Partitions revoked and kept until the next assignment.
    public var parkedPartitions: Set<Int32> { state.withLock { $0.parked } }

    /// What the replicas can do now: the worst of them (ready when none runs). A replica that keeps
    /// stopping by itself makes it not ready, with the reason.
    public var health: KafkaClientHealth {
        let followers = state.withLock { Array($0.followers.values) }
        var worst = KafkaClientHealth.ready
        for follower in followers {
            if follower.failures > 0, follower.consumer == nil || !follower.restored {
                worst = .notReady("the replica of token partitions \(follower.live.sorted()) stopped \(follower.failures) times in a row: \(follower.lastError ?? "")")
                continue
            }
            guard let health = follower.consumer?.health else { continue }
            if health.status == .failed { return health }
            if health.status == .notReady { worst = health }
        }
        return worst
    }

    /// Whether a restore is under way (some held partitions are not read to their end yet).
    public var isRestoring: Bool { state.withLock { $0.followers.values.contains { !$0.restored } } }

    // MARK: Inside

    private func drop(_ partitions: Set<Int32>, _ stop: [any MessageSource]) {
        guard !partitions.isEmpty else { return }
        tokens.drop(partitions: partitions)
        for consumer in stop { consumer.shutdown() }
        tokensGauge.record(Double(tokens.count))
    }

    /// Waits until the followers of `assigned` (less those interrupted) were read to their end
    /// (`true`), or the loader stopped, everything was interrupted, or the task was cancelled.
    private func waitRestored(_ assigned: Set<Int32>) async -> Bool {
        let id = state.withLock { state in
            defer { state.next += 1 }
            return state.next
        }
        while true {
            let done: Bool? = state.withLock { state in
                if state.stopped || Task.isCancelled { return false }
                let waited = assigned.subtracting(state.interrupted)
                if waited.isEmpty { return false }
                return state.pending(waited).isEmpty ? true : nil
            }
            if let done { return done }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        if state.stopped || Task.isCancelled { return true }
                        state.waiters[id] = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            } onCancel: {
                let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.resume()
            }
        }
    }

    private func notifyWaiters() {
        for waiter in state.withLock({ $0.takeWaiters() }) { waiter.resume() }
    }

    /// Runs the replicas of follower `id` until its partitions are no longer held or the loader
    /// stops: a replica that stops by itself is replaced, after a backoff (1 s, doubling to 30 s).
    private func follow(_ id: UInt64) async {
        var backoff = Duration.seconds(1)
        while true {
            guard let partitions = state.withLock({ $0.stopped ? nil : $0.followers[id]?.live }), !Task.isCancelled else { return }
            var failure: String
            do {
                let consumer = try makeReplica(partitions.sorted())
                let attached = state.withLock { state -> Bool in
                    guard !state.stopped, state.followers[id] != nil else { return false }
                    state.followers[id]?.consumer = consumer
                    return true
                }
                guard attached else { return }
                try await consumer.replay { seconds in
                    restoreSeconds.record(seconds)
                    tokensGauge.record(Double(tokens.count))
                    state.withLock { state in
                        state.followers[id]?.restored = true
                        state.followers[id]?.failures = 0
                    }
                    backoff = .seconds(1)
                    notifyWaiters()
                } apply: { message, caughtUp in
                    if let otherRecords, otherRecords(message) { return }
                    applier.apply(message, to: tokens)
                    if caughtUp { tokensGauge.record(Double(tokens.count)) }
                }
                failure = "the replica stopped"
            } catch {
                failure = "\(error)"
            }
            // Released (its partitions dropped) or stopping: done. Otherwise it stopped by itself.
            let again = state.withLock { state -> Bool in
                guard !state.stopped, state.followers[id] != nil else { return false }
                state.followers[id]?.consumer = nil
                // The next replica reads the partitions from their start: until it has caught up,
                // the table is not up to date (not ready; records newer than what it holds are not in it).
                state.followers[id]?.restored = false
                state.followers[id]?.failures += 1
                state.followers[id]?.lastError = failure
                return true
            }
            guard again, !Task.isCancelled else { return }
            notifyWaiters()
            logger.error(
                "token partitions' replica stopped; another starts after a backoff",
                metadata: ["kafka.partitions": "\(partitions.sorted())", "error": "\(failure)", "backoff": "\(backoff)"])
            guard (try? await Task.sleep(for: backoff)) != nil else { return }
            backoff = min(backoff * 2, .seconds(30))
        }
    }

    private func stop() {
        let (consumers, waiters) = state.withLock { state in
            state.stopped = true
            let consumers = state.followers.values.compactMap(\.consumer)
            state.followers = [:]
            return (consumers, state.takeWaiters())
        }
        started.finish()
        for consumer in consumers { consumer.shutdown() }
        for waiter in waiters { waiter.resume() }
    }
}
