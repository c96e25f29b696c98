import Foundation
import Synchronization

/// The taps this instance accepted lately, so that a tap sent twice (the app retried after a lost
/// answer) is published once, and the links counted lately, so that one link counts at most once
/// per ``linkWindow`` of the server's clock (a human taps no faster; a client that sends the same
/// link with ever new `tappedAt` values does).
///
/// Bounded: it remembers the last ``capacity`` taps it claimed, and forgets the oldest first. It
/// is in memory and per instance, so it does not catch a repeat that reaches another instance,
/// arrives after a restart, or after `capacity` newer taps: those are published again, with the
/// same deterministic `clickId`, and readers deduplicate by it (docs/analytics.md).
///
/// A state machine under one lock: ``claim(_:)`` decides, the caller publishes, then
/// ``settle(_:acknowledged:)`` records the verdict. A claim that was not acknowledged is
/// forgotten, so the app's retry is treated as new.
public final class RecentTaps: Sendable {
    public enum Claim: Sendable, Equatable {
        /// Not seen: publish it, then settle.
        case first
        /// Acknowledged before: do not publish it again.
        case duplicate
        /// Being published by another request right now: answer "retry" (its outcome is not known yet).
        case inFlight
        /// Another tap of the same link, the click `of`, was counted (or is being recorded) less
        /// than ``RecentTaps/linkWindow`` before: the same human tap; do not publish it.
        case tooSoon(of: String)
    }

    /// One tap per link per this much of the server's time.
    public static let linkWindow: Duration = .seconds(1)
    static let linkWindowDescription = "1 s"
    private static let linkWindowSeconds = Double(linkWindow.components.seconds) + Double(linkWindow.components.attoseconds) / 1e18

    private struct Entry {
        var acknowledged: Bool
        var slot: UInt64
        var link: String
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// Per link identity: the click counted last, and when it arrived.
        var links: [String: (clickId: String, at: Date)] = [:]
        /// The ids in claim order, as a ring; a slot number tells an entry's own slot from a stale one.
        var ring: [(id: String, slot: UInt64)?]
        var next: UInt64 = 0
    }

    public let capacity: Int
    private let state: Mutex<State>

    public init(capacity: Int) {
        precondition(capacity > 0, "RecentTaps needs a positive capacity")
        self.capacity = capacity
        self.state = Mutex(State(ring: []))
    }

    /// Claims a tap of `link` (its ``VerifiedLink/identity``) that arrived at `now`.
    public func claim(_ clickId: String, link: String, at now: Date) -> Claim {
        state.withLock { state in
            if let entry = state.entries[clickId] { return entry.acknowledged ? .duplicate : .inFlight }
            let window = Self.linkWindowSeconds
            if let last = state.links[link], now.timeIntervalSince(last.at) < window, last.clickId != clickId { return .tooSoon(of: last.clickId) }
            if state.links.count >= capacity {
                // Bounded without forgetting everyone: only links counted longer ago than the window go.
                state.links = state.links.filter { now.timeIntervalSince($0.value.at) < window }
            }
            if state.links.count < capacity { state.links[link] = (clickId, now) }
            let slot = state.next
            state.next += 1
            let index = Int(slot % UInt64(capacity))
            if index < state.ring.count {
                if let old = state.ring[index], state.entries[old.id]?.slot == old.slot {
                    state.entries.removeValue(forKey: old.id)
                }
                state.ring[index] = (clickId, slot)
            } else {
                state.ring.append((clickId, slot))
            }
            state.entries[clickId] = Entry(acknowledged: false, slot: slot, link: link)
            return .first
        }
    }

    /// Records whether the claimed tap was acknowledged by Kafka.
    public func settle(_ clickId: String, acknowledged: Bool) {
        state.withLock { state in
            if acknowledged {
                state.entries[clickId]?.acknowledged = true
            } else {
                // The app retries it: the link's window does not hold the retry back.
                if let link = state.entries.removeValue(forKey: clickId)?.link, state.links[link]?.clickId == clickId {
                    state.links.removeValue(forKey: link)
                }
            }
        }
    }

    /// Taps remembered now (at most ``capacity``).
    public var count: Int { state.withLock { $0.entries.count } }
}
