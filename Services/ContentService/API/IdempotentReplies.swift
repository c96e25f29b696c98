import DequeModule
import Foundation
import Synchronization

/// The answers to HTTP calls that carried an `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header),
/// so that a repeat gets the first answer instead of doing the work again.
///
/// Kept in this instance's memory, for ``lifetime`` (24 h) and at most ``capacity`` keys (the
/// oldest go first). A key is the backend's: two backends may use the same. A repeat that reaches
/// another instance is not answered from here; the event it publishes again has the same event id
/// (derived from the key), which the activity's owner ignores as a duplicate.
final class IdempotentReplies: Sendable {
    /// An answer kept for repeats.
    struct Answer: Sendable, Equatable {
        var status: Int
        var body: [UInt8]
    }

    /// What a call with a key may do.
    enum Claim: Equatable {
        /// First call with this key: do the work, then ``finish(_:claim:with:)`` with this claim.
        case first(UInt64)
        /// A repeat of a call that was answered: its answer.
        case answered(Answer)
        /// The first call with this key is still being handled (409).
        case inProgress
        /// The key was used for a different request (422).
        case reused
    }

    private struct Entry {
        var fingerprint: [UInt8]
        var at: Date
        var claim: UInt64
        var answer: Answer?
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// Keys in the order they were first used, with when.
        var order: Deque<(key: String, at: Date)> = []
        var claims: UInt64 = 0
    }

    let lifetime: TimeInterval
    let capacity: Int
    private let state = Mutex(State())

    init(lifetime: Duration = .seconds(86_400), capacity: Int = 100_000) {
        self.lifetime = lifetime / .seconds(1)
        self.capacity = capacity
    }

    /// Claims `key` for a request whose method, path and body hash to `fingerprint`, at `now`.
    func claim(_ key: String, fingerprint: [UInt8], now: Date) -> Claim {
        state.withLock { state in
            while let oldest = state.order.first, now.timeIntervalSince(oldest.at) > lifetime || state.order.count > capacity {
                state.order.removeFirst()
                // (A key freed by `finish` and claimed again has a later place of its own.)
                if state.entries[oldest.key]?.at == oldest.at { state.entries[oldest.key] = nil }
            }
            guard let entry = state.entries[key] else {
                state.claims += 1
                state.entries[key] = Entry(fingerprint: fingerprint, at: now, claim: state.claims)
                state.order.append((key, now))
                return .first(state.claims)
            }
            guard entry.fingerprint == fingerprint else { return .reused }
            return entry.answer.map(Claim.answered) ?? .inProgress
        }
    }

    /// The first call with `key` (its `claim`) was answered: `answer` is kept for repeats; `nil`
    /// (the call was refused: a retry is judged again) frees the key. Nothing happens when the key
    /// is not this claim's any more (it expired, or went beyond the capacity, and was claimed again).
    func finish(_ key: String, claim: UInt64, with answer: Answer?) {
        state.withLock { state in
            guard state.entries[key]?.claim == claim else { return }
            if let answer {
                state.entries[key]?.answer = answer
            } else {
                state.entries[key] = nil  // (its place in `order` goes when it expires)
            }
        }
    }

    /// How many keys are kept.
    var count: Int { state.withLock { $0.entries.count } }
}
