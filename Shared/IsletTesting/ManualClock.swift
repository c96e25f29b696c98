import Foundation
import IsletMessages
import Synchronization

/// A ``WallClock`` tests move by hand. Sleepers wake when it passes their time, or when their task
/// is cancelled (as with a real clock).
public final class ManualClock: WallClock, Sendable {
    private struct State {
        var now: Date
        var nextID = 0
        var sleepers: [(until: Date, id: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var watchers: [(until: Date, id: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state: Mutex<State>

    /// A clock at `start` (by default 2026-11-18 20:26:40 UTC, a fixed moment every suite shares).
    public init(_ start: Date = Date(timeIntervalSince1970: 1_795_000_000)) { state = Mutex(State(now: start)) }

    public var now: WallInstant { WallInstant(state.withLock { $0.now }) }
    public var minimumResolution: Duration { .nanoseconds(1) }

    public func sleep(until deadline: WallInstant, tolerance: Duration?) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let (ready, watchers) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
                    if deadline.date <= state.now || Task.isCancelled { return (true, []) }
                    state.sleepers.append((deadline.date, id, continuation))
                    let watchers = state.watchers.filter { $0.until == deadline.date }.map(\.continuation)
                    state.watchers.removeAll { $0.until == deadline.date }
                    return (false, watchers)
                }
                if ready { continuation.resume() }
                for watcher in watchers { watcher.resume() }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index).continuation
            }
            sleeper?.resume()
        }
        try Task.checkCancellation()
    }

    /// Whether something sleeps until exactly `date` (how a test knows a wake-up was scheduled
    /// before it moves the clock past it).
    public func hasSleeper(until date: Date) -> Bool { state.withLock { $0.sleepers.contains { $0.until == date } } }

    /// Returns once something sleeps until exactly `date` (at once if something does): a test knows
    /// a wake-up was scheduled before it moves the clock past it, without polling.
    public func sleeper(until date: Date) async {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let present = state.withLock { state -> Bool in
                    if state.sleepers.contains(where: { $0.until == date }) || Task.isCancelled { return true }
                    state.watchers.append((date, id, continuation))
                    return false
                }
                if present { continuation.resume() }
            }
        } onCancel: {
            let watcher = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard let index = state.watchers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.watchers.remove(at: index).continuation
            }
            watcher?.resume()
        }
    }

    /// How many tasks sleep on this clock now.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// Moves the clock on by `seconds` and wakes the sleepers whose time has come.
    public func advance(_ seconds: TimeInterval) {
        let due = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.now = state.now.addingTimeInterval(seconds)
            let now = state.now
            let due = state.sleepers.filter { $0.until <= now }.map(\.continuation)
            state.sleepers.removeAll { $0.until <= now }
            return due
        }
        for continuation in due { continuation.resume() }
    }

    /// Moves the clock on by `duration`.
    public func advance(by duration: Duration) { advance(duration / .seconds(1)) }
}
