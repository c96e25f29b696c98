/// One writer at a time per key: the registry reads a token's state, decides, publishes and
/// applies the result as one step, so two concurrent requests for the same activity cannot both
/// decide from the same old state. Different keys never wait for each other.
actor KeyedLocks {
    /// Waiters per held key, in arrival order.
    private var held: [String: [CheckedContinuation<Void, Never>]] = [:]

    func withLock<T: Sendable, E: Error>(_ key: String, _ body: @Sendable () async throws(E) -> T) async throws(E) -> T {
        await lock(key)
        do {
            let result = try await body()
            unlock(key)
            return result
        } catch {
            unlock(key)
            throw error
        }
    }

    private func lock(_ key: String) async {
        if held[key] == nil {
            held[key] = []
            return
        }
        await withCheckedContinuation { held[key, default: []].append($0) }
    }

    private func unlock(_ key: String) {
        guard var waiters = held[key], !waiters.isEmpty else {
            held[key] = nil
            return
        }
        let next = waiters.removeFirst()
        held[key] = waiters
        next.resume()
    }
}
