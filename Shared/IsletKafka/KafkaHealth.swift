import Dispatch
import Synchronization

/// What a Kafka client can do now: what a service's `/health` reports for it.
///
/// - `ready`: it reached the cluster recently and nothing stops it (for a consumer in a group:
///   the group gave it its partitions, possibly none).
/// - `notReady`: it cannot do its job now but is working on it (the cluster does not answer, the
///   client is being recreated, the group is rebalancing). An orchestrator should send it no work.
/// - `failed`: recovery keeps failing; the process should be restarted.
public struct KafkaClientHealth: Sendable, Equatable, CustomStringConvertible {
    public enum Status: String, Sendable, Equatable {
        case ready, notReady, failed
    }

    public var status: Status
    /// Why it is not ready (`nil` when ready).
    public var reason: String?

    public init(status: Status, reason: String? = nil) {
        self.status = status
        self.reason = reason
    }

    public static let ready = KafkaClientHealth(status: .ready)
    public static func notReady(_ reason: String) -> KafkaClientHealth { KafkaClientHealth(status: .notReady, reason: reason) }
    public static func failed(_ reason: String) -> KafkaClientHealth { KafkaClientHealth(status: .failed, reason: reason) }

    public var description: String { reason.map { "\(status.rawValue): \($0)" } ?? status.rawValue }
}

/// When a client counts as out of touch with the cluster, and how it recovers.
///
/// A client is in touch while the cluster answers it: a delivery acknowledged, a record fetched,
/// or — when it has nothing else to do — a metadata request answered (the probe). A broker that is
/// stopped (SIGSTOP, a long GC pause) keeps its TCP connections open, so only answers tell.
public struct KafkaHealthPolicy: Sendable, Equatable {
    /// How often a client that heard nothing from the cluster for this long asks it for metadata.
    /// Default 1 s.
    public var probeInterval: Duration
    /// How long one probe may wait for its answer. Default 2 s.
    public var probeTimeout: Duration
    /// No answer from the cluster for this long — or records waiting this long without an
    /// acknowledgement — and the client is not ready. Default 5 s.
    public var unreachableAfter: Duration
    /// A client that librdkafka declared unusable is recreated; after this many recreations in a
    /// row without a success between them it is reported `failed`. Default 5.
    public var maximumRecoveries: Int
    /// The wait before the second recreation in a row; it doubles with each further one, up to
    /// ``maximumRecoveryBackoff``. The first recreation is immediate. Default 500 ms.
    public var recoveryBackoff: Duration
    /// Default 30 s.
    public var maximumRecoveryBackoff: Duration
    /// A replica more than ``lagTolerance`` records behind the end of its partitions that has not
    /// gained on it for this long is not ready: the table it keeps is falling behind the topic
    /// (a group member falling behind is logged and measured, `islet_kafka_consumer_lag_records`,
    /// but stays ready: its group can move its partitions, a replica's table cannot). A group member
    /// that reads nothing at all for this long though it fetches is starved (``longestFetchWait``).
    /// Default 30 s.
    public var fallingBehindAfter: Duration = .seconds(30)
    /// How far behind the end a consumer may be and still count as keeping up (what one fetch
    /// brings while records keep arriving). Default 1,000 records.
    public var lagTolerance: Int64 = 1_000
    /// How often a consumer looks at its lag (librdkafka's cached positions and watermarks: no
    /// request). Default 5 s.
    public var lagLookInterval: Duration = .seconds(5)
    /// A consumer behind that reads nothing for ``fallingBehindAfter`` though it fetches is answered
    /// with nothing by its broker: its handle is replaced by one whose `fetch.wait.max.ms` is four
    /// times longer, up to this. (The local broker answers a fetch with what it read within the
    /// wait: holding gigabytes, it reads nothing in the hot path's 10 ms.) Default 500 ms, Kafka's.
    public var longestFetchWait: Duration = .milliseconds(500)

    /// The fetch wait to try after `current` left a consumer starved (`nil`: already the longest).
    public func longerFetchWait(after current: Duration) -> Duration? {
        guard current < longestFetchWait else { return nil }
        return min(max(current * 4, .milliseconds(1)), longestFetchWait)
    }

    public init(
        probeInterval: Duration = .seconds(1), probeTimeout: Duration = .seconds(2), unreachableAfter: Duration = .seconds(5),
        maximumRecoveries: Int = 5, recoveryBackoff: Duration = .milliseconds(500), maximumRecoveryBackoff: Duration = .seconds(30)
    ) {
        self.probeInterval = probeInterval
        self.probeTimeout = probeTimeout
        self.unreachableAfter = unreachableAfter
        self.maximumRecoveries = max(1, maximumRecoveries)
        self.recoveryBackoff = recoveryBackoff
        self.maximumRecoveryBackoff = maximumRecoveryBackoff
    }

    /// The wait before the `attempt`-th recreation in a row (1-based): none for the first.
    public func backoff(beforeRecovery attempt: Int) -> Duration {
        guard attempt > 1 else { return .zero }
        let exponent = min(attempt - 2, 20)
        return min(recoveryBackoff * (1 << exponent), maximumRecoveryBackoff)
    }
}

/// Monotonic nanoseconds (since boot), for timestamps kept in atomics.
enum MonotonicTime {
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds / 1_000_000_000))
    }

    /// `later - earlier` as a readable number of seconds ("7.2 s").
    static func seconds(from earlier: UInt64, to later: UInt64) -> String {
        let tenths = (later &- earlier) / 100_000_000
        return "\(tenths / 10).\(tenths % 10) s"
    }
}

/// When the cluster last answered a client, and the probe that asks it when nothing else does.
final class ClusterContact: Sendable {
    private let at = Atomic<UInt64>(0)
    private let refusal = Mutex<LoginRefused?>(nil)

    /// When the cluster last answered (``MonotonicTime``; 0: never).
    var last: UInt64 { at.load(ordering: .acquiring) }

    /// The cluster's last refusal of the client's login (SASL), if one came after its last answer.
    var loginRefused: LoginRefused? {
        let last = self.last
        return refusal.withLock { refused in refused.flatMap { $0.at >= last ? $0 : nil } }
    }

    /// librdkafka reported `error` (any thread): an authentication failure is kept for the health.
    func observe(_ error: KafkaError, at now: UInt64 = MonotonicTime.now()) {
        guard error.isAuthenticationFailure else { return }
        refusal.withLock { $0 = LoginRefused(at: now, reason: error.message) }
    }

    /// The cluster answered (an acknowledgement, records fetched, a rebalance, a probe).
    func heard(at now: UInt64 = MonotonicTime.now()) {
        at.store(now, ordering: .releasing)
    }

    /// While `running` holds (and the task is not cancelled): asks the cluster for metadata
    /// whenever nothing was heard from it for a probe interval, so that a client's health knows
    /// whether it answers even when the client has nothing else to do. `client` is the handle to
    /// ask (`nil`: none now, e.g. while a producer is recreated).
    func probe(policy: KafkaHealthPolicy, while running: () -> Bool, client: () -> RDKafkaClient?) async {
        let interval = MonotonicTime.nanoseconds(policy.probeInterval)
        let timeout = policy.probeTimeout.librdkafkaMilliseconds
        repeat {
            guard running() else { return }
            if MonotonicTime.now() &- last >= interval, let client = client(),
                await DedicatedThread.run(name: "islet-kafka-probe", { client.probe(timeoutMilliseconds: timeout) })
            {
                heard()
            }
        } while (try? await Task.sleep(for: policy.probeInterval)) != nil
    }
}

/// The cluster refused the client's login (librdkafka's `RD_KAFKA_RESP_ERR__AUTHENTICATION`: a wrong
/// SASL user or password, a mechanism the listener does not offer). librdkafka keeps trying; the
/// health says why it gets nowhere.
struct LoginRefused: Sendable, Equatable {
    /// When (``MonotonicTime``).
    var at: UInt64
    var reason: String
}

/// The facts a client's health is decided from, at one moment. Kept apart from the clients so the
/// rule can be tested without a broker.
struct KafkaHealthSnapshot: Sendable, Equatable {
    enum Phase: Sendable, Equatable {
        /// ``KafkaProducer/run()`` or ``KafkaConsumer/run()`` has not started.
        case notStarted
        case running
        /// Recreating the client after it became unusable.
        case recovering(reason: String)
        case stopping
    }

    var phase: Phase
    /// Recreations in a row without a success since.
    var consecutiveRecoveries: Int
    /// Why the last recreation happened (for the `failed` reason).
    var lastRecoveryReason: String?
    /// When the cluster last answered (0: never).
    var lastContact: UInt64
    /// Producers: records handed to librdkafka and not yet reported on, and since when that count
    /// has been above zero without a successful delivery.
    var waiting: Int = 0
    var waitingSince: UInt64 = 0
    /// Consumers in a group: whether the group gave this member its partitions since it (re)joined.
    var awaitingAssignment: Bool = false
    /// Replicas: how far behind the end of their partitions they are and have not gained on it
    /// since (``LagWatch``).
    var fallingBehind: LagWatch.Behind?
    /// Group members: how far behind the end they are, having read nothing while fetching since
    /// (``LagWatch/starved``). One is recreated with a longer fetch wait
    /// (``KafkaHealthPolicy/longestFetchWait``); starved at the longest, it is not ready.
    var starved: LagWatch.Behind?
    /// The `fetch.wait.max.ms` its handle fetches with.
    var fetchWaitMilliseconds: Int = 0
    /// The cluster refused the client's login after it last answered (``ClusterContact/loginRefused``).
    var loginRefused: LoginRefused? = nil

    func health(now: UInt64, policy: KafkaHealthPolicy) -> KafkaClientHealth {
        if consecutiveRecoveries >= policy.maximumRecoveries {
            return .failed(
                "recreated \(consecutiveRecoveries) times in a row without a success"
                    + (lastRecoveryReason.map { "; last: \($0)" } ?? ""))
        }
        let limit = MonotonicTime.nanoseconds(policy.unreachableAfter)
        switch phase {
        case .notStarted: return .notReady("not started")
        case .stopping: return .notReady("stopping")
        case .recovering(let reason): return .notReady("being recreated after: \(reason)")
        case .running: break
        }
        if let refused = loginRefused {
            return .notReady(
                "Kafka refused this client's login (check ISLET_KAFKA_SASL_USERNAME, ISLET_KAFKA_SASL_PASSWORD and ISLET_KAFKA_SASL_MECHANISMS): \(refused.reason)"
            )
        }
        if lastContact == 0 { return .notReady("no answer from Kafka yet") }
        if now > lastContact && now - lastContact > limit {
            return .notReady("no answer from Kafka for \(MonotonicTime.seconds(from: lastContact, to: now))")
        }
        if waiting > 0, waitingSince > 0, now > waitingSince, now - waitingSince > limit {
            return .notReady("\(waiting) records not acknowledged for \(MonotonicTime.seconds(from: waitingSince, to: now))")
        }
        if awaitingAssignment { return .notReady("waiting for the consumer group to assign partitions") }
        if let behind = fallingBehind, behind.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now) {
            return .notReady(
                "\(behind.records) records behind the end of its partitions, not gained on for \(MonotonicTime.seconds(from: behind.since, to: now))")
        }
        if let starved, starved.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now) {
            return .notReady(
                "\(starved.records) records behind the end of its partitions, nothing read for \(MonotonicTime.seconds(from: starved.since, to: now))"
                    + " though fetching (\(fetchWaitMilliseconds) ms fetch wait)")
        }
        return .ready
    }
}

/// Whether a consumer gains on the end of its partitions, from its lag (records between its
/// position and the high watermark of each partition) looked at now and then. Kept apart from the
/// consumer so the rules can be tested without a broker.
///
/// - A consumer within the tolerance keeps up.
/// - One further behind **gains** while each look finds it less behind than the look it is
///   measured from *and* it read records since; otherwise it has not gained since that look. A
///   lower lag with nothing read (a watermark the broker reported lower) is not progress.
/// - One behind that read nothing at all since a look, though it was fetching (not paused because
///   its caller is busy), is **starved** since that look: the broker answers its fetches with nothing.
/// - Each partition counts with its latest known lag: a look that does not know a partition's
///   position or end (a new handle, a fetch not answered yet) keeps the last one it knew, so that
///   knowing fewer partitions never looks like progress. A partition not read since it was
///   assigned has no position and counts nothing until it has.
struct LagWatch: Sendable {
    struct Behind: Sendable, Equatable {
        /// Records behind at the last look.
        var records: Int64
        /// Since when it has not gained, or not read (``MonotonicTime``).
        var since: UInt64

        /// Not gained on the end for longer than `limit` nanoseconds, at `now`.
        func lasted(beyond limit: UInt64, at now: UInt64) -> Bool {
            now > since && now - since > limit
        }
    }

    let tolerance: Int64
    /// Each owned partition's lag at the last look that knew it.
    private var byPartition: [KafkaTopicPartition: Int64] = [:]
    /// The look progress is measured from: the last one that found the consumer less behind.
    private var reference: (at: UInt64, records: Int64, consumed: UInt64)?
    /// The first look since which nothing was read while fetching.
    private var starvation: (at: UInt64, consumed: UInt64)?
    /// The last look's lag.
    private(set) var records: Int64 = 0

    init(tolerance: Int64) {
        self.tolerance = tolerance
    }

    /// Takes a look at `now`: the lag of the partitions whose position and end are `known`, the
    /// partitions `owned`, how many records the consumer has `consumed` since it started, and
    /// whether it is `fetching` (none of its partitions paused).
    mutating func note(known: [KafkaTopicPartition: Int64], owned: [KafkaTopicPartition], consumed: UInt64, fetching: Bool, at now: UInt64) {
        var latest: [KafkaTopicPartition: Int64] = [:]
        for partition in owned {
            if let lag = known[partition] ?? byPartition[partition] { latest[partition] = lag }
        }
        byPartition = latest
        note(records: latest.values.reduce(0, +), consumed: consumed, fetching: fetching, at: now)
    }

    /// Takes a look at `now`: `records` behind in all.
    mutating func note(records: Int64, consumed: UInt64, fetching: Bool, at now: UInt64) {
        self.records = records
        guard records > tolerance else {
            reference = nil
            starvation = nil
            return
        }
        if let reference, records >= reference.records || consumed == reference.consumed {
            // Not gaining since the reference (or gaining on paper only: nothing read).
        } else {
            reference = (now, records, consumed)
        }
        if fetching, let starvation, starvation.consumed == consumed {
            // Still nothing read since.
        } else {
            starvation = fetching ? (now, consumed) : nil
        }
    }

    /// The consumer's handle was replaced: its starvation is measured afresh (the new handle gets
    /// its own chance); how far behind each partition was is kept.
    mutating func restartStarvation() {
        starvation = nil
    }

    /// How far behind it is and since when it has not gained (`nil`: keeping up, or gaining).
    /// A consumer that just fell behind counts as not gaining since the look that found it so.
    var behind: Behind? {
        reference.map { Behind(records: records, since: $0.at) }
    }

    /// How far behind it is and since when it read nothing while fetching (`nil`: it read, or keeps up).
    var starved: Behind? {
        starvation.map { Behind(records: records, since: $0.at) }
    }
}
