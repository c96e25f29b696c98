import DequeModule
import Synchronization

/// Items handed from one side to a fixed set of worker tasks: each item goes to one worker, in the
/// order pushed. A worker waiting for an item returns `nil` once the queue is finished or its task
/// is cancelled.
final class WorkQueue<Item: Sendable>: Sendable {
    private struct State {
        var items = Deque<Item>()
        var waiters = Deque<(id: UInt64, continuation: CheckedContinuation<Item?, Never>)>()
        var nextID: UInt64 = 0
        var finished = false
    }

    private let state = Mutex(State())

    /// Hands `item` to a waiting worker, or keeps it for the next one (dropped once finished).
    func push(_ item: Item) {
        let waiter = state.withLock { state -> CheckedContinuation<Item?, Never>? in
            guard !state.finished else { return nil }
            if let waiter = state.waiters.popFirst() { return waiter.continuation }
            state.items.append(item)
            return nil
        }
        waiter?.resume(returning: item)
    }

    /// The next item; `nil` once finished or cancelled.
    func next() async -> Item? {
        // Under load an item is usually there: taken with one lock, no continuation.
        let (waiting, id) = state.withLock { state -> (Item?, UInt64) in
            if let item = state.items.popFirst() { return (item, 0) }
            defer { state.nextID += 1 }
            return (nil, state.nextID)
        }
        if let waiting { return waiting }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = state.withLock { state -> Item?? in
                    if let item = state.items.popFirst() { return .some(item) }
                    if state.finished || Task.isCancelled { return .some(nil) }
                    state.waiters.append((id, continuation))
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Item?, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(returning: nil)
        }
    }

    /// Wakes every waiting worker with `nil`; items still kept are dropped.
    func finish() {
        let waiters = state.withLock { state in
            state.finished = true
            state.items.removeAll()
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.continuation.resume(returning: nil) }
    }
}
