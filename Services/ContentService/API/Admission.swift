import Synchronization

/// At most `limit` of something under way at once; one more is refused rather than queued (the
/// outcome lookups of ``OutcomeReader``, the forwarded calls of ``PeerForwarding``).
final class Admission: Sendable {
    let limit: Int
    private let running = Mutex(0)

    init(limit: Int) { self.limit = limit }

    /// How many are under way now.
    var count: Int { running.withLock { $0 } }

    /// Takes a place if one is free; each place taken is given back with ``leave()``.
    func enter() -> Bool {
        running.withLock { running in
            guard running < limit else { return false }
            running += 1
            return true
        }
    }

    func leave() { running.withLock { $0 -= 1 } }
}
