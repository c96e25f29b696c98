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

/// At most `limit` holders at once, served in arrival order: ``acquire()`` waits for a
/// ``release()``, or until its task is cancelled (then it throws and holds nothing).
final class AsyncSemaphore: Sendable {
    private struct State {
        var available: Int
        var waiting: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)] = []
        var lastId: UInt64 = 0
        /// Waiters cancelled before they were in the line.
        var cancelled: Set<UInt64> = []
    }
    private let state: Mutex<State>

    private let limit: Int

    init(_ limit: Int) {
        self.limit = limit
        state = Mutex(State(available: limit))
    }

    /// No holder.
    var isIdle: Bool { state.withLock { $0.available == limit } }
    /// Waiting for a place (tests).
    var waiting: Int { state.withLock { $0.waiting.count } }

    func acquire() async throws(CancellationError) {
        let id = state.withLock { state in
            state.lastId += 1
            return state.lastId
        }
        let held = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let answer = state.withLock { state -> Bool? in
                    if state.cancelled.remove(id) != nil { return false }
                    if state.available > 0 {
                        state.available -= 1
                        return true
                    }
                    state.waiting.append((id, continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                if let index = state.waiting.firstIndex(where: { $0.id == id }) { return state.waiting.remove(at: index).continuation }
                // Not in the line yet (it will not join it), or already holding (nothing to undo).
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume(returning: false)
        }
        state.withLock { _ = $0.cancelled.remove(id) }
        if !held { throw CancellationError() }
    }

    func release() {
        let next = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            if state.waiting.isEmpty {
                state.available += 1
                return nil
            }
            return state.waiting.removeFirst().continuation
        }
        next?.resume(returning: true)
    }
}
