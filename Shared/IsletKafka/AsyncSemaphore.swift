import Synchronization

/// At most `limit` holders at once, served in arrival order: ``acquire()`` waits for a
/// ``release()``, or until its task is cancelled (then it throws and holds nothing).
public final class AsyncSemaphore: Sendable {
    private struct State {
        var available: Int
        public var waiting: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)] = []
        var lastId: UInt64 = 0
        /// Waiters cancelled before they were in the line.
        var cancelled: Set<UInt64> = []
    }
    private let state: Mutex<State>

    private let limit: Int

    public init(_ limit: Int) {
        self.limit = limit
        state = Mutex(State(available: limit))
    }

    /// No holder.
    public var isIdle: Bool { state.withLock { $0.available == limit } }
    /// Waiting for a place (tests).
    public var waiting: Int { state.withLock { $0.waiting.count } }

    public func acquire() async throws(CancellationError) {
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

    public func release() {
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
