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
