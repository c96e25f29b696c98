import Synchronization

/// Who may touch the engine's memory, and when: an event's work holds a *lane's* turn (many lanes
/// at once: their activities differ), while the freshness monitor, a changelog round, a restore and
/// the resending of requests Kafka refused hold the *whole* turn (no lane's work under way).
/// Served in arrival order: once the whole turn is asked for, lanes asking after it wait for it,
/// so a sweep is not starved by a busy stream of events.
final class ServiceTurns: Sendable {
    private enum Kind { case lane, whole }
    private struct State {
        /// Lane turns held now.
        var lanes = 0
        var whole = false
        var waiting: [(kind: Kind, continuation: CheckedContinuation<Void, Never>)] = []

        /// Whether a turn of `kind` may start now (nobody waits before it).
        func mayStart(_ kind: Kind) -> Bool {
            guard waiting.isEmpty, !whole else { return false }
            return kind == .lane || lanes == 0
        }

        /// The waiters that start now that a turn ended: the whole turn alone, or every lane at
        /// the front of the line.
        mutating func next() -> [CheckedContinuation<Void, Never>] {
            guard !whole, let first = waiting.first else { return [] }
            if first.kind == .whole {
                guard lanes == 0 else { return [] }
                whole = true
                return [waiting.removeFirst().continuation]
            }
            var started: [CheckedContinuation<Void, Never>] = []
            while let front = waiting.first, front.kind == .lane {
                lanes += 1
                started.append(waiting.removeFirst().continuation)
            }
            return started
        }
    }
    private let state = Mutex(State())

    /// Runs `body` in a lane's turn.
    func lane<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await begin(.lane)
        defer { end(.lane) }
        return try await body()
    }

    /// Runs `body` when no other turn runs.
    func whole<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await begin(.whole)
        defer { end(.whole) }
        return try await body()
    }

    /// Lane turns held now, and whether the whole turn is (tests).
    var held: (lanes: Int, whole: Bool) { state.withLock { ($0.lanes, $0.whole) } }
    /// Turns asked for and not started (tests).
    var waiting: Int { state.withLock { $0.waiting.count } }

    private func begin(_ kind: Kind) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let start = state.withLock { state -> Bool in
                guard state.mayStart(kind) else {
                    state.waiting.append((kind, continuation))
                    return false
                }
                if kind == .lane { state.lanes += 1 } else { state.whole = true }
                return true
            }
            if start { continuation.resume() }
        }
    }

    private func end(_ kind: Kind) {
        let started = state.withLock { state in
            if kind == .lane { state.lanes -= 1 } else { state.whole = false }
            return state.next()
        }
        for continuation in started { continuation.resume() }
    }
}
