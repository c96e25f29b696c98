import Synchronization

/// How a connection is used, shared by ``APNsConnection`` (any thread) and its ``APNsStreams``
/// (its event loop): the pushes under way on it, whether it is retired, and the server's GOAWAY.
final class ConnectionUsage: Sendable {
    private struct State {
        /// Pushes started on it and not finished.
        var active = 0
        /// It takes no new pushes and closes once none is active: a request on it was not written
        /// within its deadline, its stream ids are used up, or its lane replaced it.
        var retired = false
    }

    private let state = Mutex(State())
    let goAway = GoAwayWatcher()

    var isRetired: Bool { state.withLock { $0.retired } }

    func started() { state.withLock { $0.active += 1 } }

    /// A push finished; whether the connection is to close now (retired, none left).
    func finished() -> Bool {
        state.withLock { state in
            state.active -= 1
            return state.active == 0 && state.retired
        }
    }

    /// It takes no new pushes; whether it is to close now (none under way).
    @discardableResult
    func retire() -> Bool {
        state.withLock { state in
            state.retired = true
            return state.active == 0
        }
    }
}
