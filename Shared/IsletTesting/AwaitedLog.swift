import Synchronization

/// Values appended by one side that a test awaits by count, without polling. `AwaitedLog<Void>`
/// is a counter.
public final class AwaitedLog<Value: Sendable>: Sendable {
    private struct State {
        var values: [Value] = []
        var waiters: [UInt64: (count: Int, continuation: CheckedContinuation<Void, Never>)] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var values: [Value] { state.withLock { $0.values } }
    public var count: Int { state.withLock { $0.values.count } }

    public func append(_ value: Value) {
        let due = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.values.append(value)
            let count = state.values.count
            let due = state.waiters.filter { $0.value.count <= count }
            for id in due.keys { state.waiters[id] = nil }
            return due.values.map(\.continuation)
        }
        for waiter in due { waiter.resume() }
    }

    /// Returns once at least `count` values were appended, or when the task is cancelled (with
    /// ``withTimeout(_:_:_:)``: a bound on the wait).
    public func wait(for count: Int) async {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let reached = state.withLock { state -> Bool in
                    if state.values.count >= count || Task.isCancelled { return true }
                    state.waiters[id] = (count, continuation)
                    return false
                }
                if reached { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }
}
