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
