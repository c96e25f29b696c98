import Synchronization

/// Waits until `work` has finished or `timeout` has passed, whichever comes first. The work is not
/// cancelled at the timeout: it goes on in the background (a revocation handler bounds how long it
/// holds the rebalance up, while a write already handed to Kafka finishes by itself).
/// - Returns: whether `work` finished in time.
@discardableResult
public func waitAtMost(_ timeout: Duration, for work: @escaping @Sendable () async -> Void) async -> Bool {
    let finished = Mutex<Bool?>(nil)
    return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        let once: @Sendable (Bool) -> Void = { inTime in
            if finished.withLock({ done in
                defer { done = done ?? inTime }
                return done == nil
            }) {
                continuation.resume(returning: inTime)
            }
        }
        Task {
            await work()
            once(true)
        }
        Task {
            try? await Task.sleep(for: timeout)
            once(false)
        }
    }
}
