/// What changed since it was last written to a changelog, by partition: the keys of a service's
/// state (an activity's memory, a budget) whose latest value the next round writes. Many changes
/// of one key make one record.
///
/// Only the partitions this instance owns are tracked (``track(only:)``, on each assignment);
/// until the first call every partition is (a start's state, rebuilt, may be ahead of the changelog).
public struct PartitionChanges<Key: Hashable & Sendable>: Sendable {
    private var changed: [Int32: Set<Key>] = [:]
    /// The partitions tracked (`nil`: all, until the first ``track(only:)``).
    public private(set) var tracked: Set<Int32>?

    public init() {}

    /// `key`, of `partition`, changed (nothing when its partition is not tracked or not known).
    public mutating func note(_ key: Key, partition: Int32?) {
        guard let partition, tracked?.contains(partition) ?? true else { return }
        changed[partition, default: []].insert(key)
    }

    /// Takes the keys of `partitions` that changed since they were last taken.
    public mutating func take(partitions: Set<Int32>) -> [(partition: Int32, keys: Set<Key>)] {
        partitions.compactMap { partition in changed.removeValue(forKey: partition).map { (partition, $0) } }
    }

    /// Tracks only `partitions` from now on: the others' changes are dropped. Returns the
    /// partitions gained since the last call (none on the first: everything was tracked).
    @discardableResult
    public mutating func track(only partitions: Set<Int32>) -> Set<Int32> {
        let gained = tracked.map { partitions.subtracting($0) } ?? []
        changed = changed.filter { partitions.contains($0.key) }
        tracked = partitions
        return gained
    }

    /// Drops what changed in partitions other than `partitions`, and goes on noting changes of
    /// every partition (what the budgets do: a budget of a partition away may come back with it).
    public mutating func keep(only partitions: Set<Int32>) {
        changed = changed.filter { partitions.contains($0.key) }
    }

    /// Drops what changed in `partitions` (their state was forgotten).
    public mutating func drop(partitions: some Sequence<Int32>) {
        for partition in partitions { changed[partition] = nil }
    }

    /// How many keys of `partitions` changed and were not taken yet.
    public func count(partitions: Set<Int32>) -> Int { partitions.reduce(0) { $0 + (changed[$1]?.count ?? 0) } }
}
