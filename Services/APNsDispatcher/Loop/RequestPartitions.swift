/// The partitions of `islet.push-requests.v1` the dispatcher was assigned, and those whose recent
/// outcomes are to be read before their first request is handled: every partition, at every
/// assignment. A partition given up and assigned back may have been another instance's meanwhile
/// (a cooperative rebalance moves it on later; an eager one may assign it to this instance, then
/// take it away before a record was read; a consumer that joins again as a new member leaves the
/// group in between), and what this engine remembers of its own finished requests is a window, not
/// the partition's history: a request read again past it would be sent again.
struct RequestPartitions {
    private(set) var owned: Set<Int32> = []
    private var unchecked: Set<Int32> = []

    mutating func assigned(_ partitions: [Int32]) {
        owned.formUnion(partitions)
        unchecked.formUnion(partitions)
    }

    mutating func revoked(_ partitions: [Int32]) {
        owned.subtract(partitions)
        unchecked.subtract(partitions)
    }

    /// Whether the recent outcomes of `partition` are to be read before its record is handled (once per assignment).
    mutating func takeCheck(_ partition: Int32) -> Bool { unchecked.remove(partition) != nil }
}
