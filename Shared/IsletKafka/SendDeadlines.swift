/// The deadlines of awaited sends, in the order they were registered (one timeout per producer, so
/// that is the order they fall due), checked by the poll loop after each poll (every 100 ms at most).
struct SendDeadlines {
    private var entries: [(deadline: UInt64, timeout: Duration, waiter: SendWaiter)] = []
    private var head = 0

    mutating func append(_ waiter: SendWaiter, at deadline: UInt64, after timeout: Duration) {
        entries.append((deadline, timeout, waiter))
    }

    /// Removes and returns the entries due at `now` (a waiter already finished is finished again in vain).
    mutating func due(at now: UInt64) -> [(timeout: Duration, waiter: SendWaiter)] {
        var due: [(timeout: Duration, waiter: SendWaiter)] = []
        while head < entries.count, entries[head].deadline <= now {
            due.append((entries[head].timeout, entries[head].waiter))
            head += 1
        }
        if head > 1_024, head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        return due
    }
}
