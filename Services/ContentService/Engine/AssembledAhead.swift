import DequeModule
import Foundation
import IsletMessages
import Synchronization

/// Events assembled when a backend handed them to this instance (``EventIntake``), kept until
/// they are read back from `islet.activity-events.v1`, so that an event is assembled once.
///
/// An assembly is used again only for the same event (every field equal), made from equal
/// inputs (``ContentEngine/AssemblyInputs``: the memory, the token, the floor), without images
/// to inline, and at most ``maximumAge`` ago (the stale date and the alert window count from when
/// it was made), and when no alert of the activity left the alert window in between (the decision
/// to alert would differ). Anything else is assembled again. An entry is taken once, hit or miss;
/// one never read back (its publication failed, or the partition moved) falls out when it is too
/// old or when ``capacity`` newer ones are kept (checked at every keep and take).
final class AssembledAhead: Sendable {
    /// How long an assembly stays usable: its stale date, dismissal date and alert time count from
    /// the check, at most this much before the read. An event read back later (a backlog) is
    /// assembled again.
    static let maximumAge: TimeInterval = 2
    /// Entries kept at most (each a few KB: the payloads).
    static let capacity = 4_096

    private struct Entry: Sendable {
        var event: ActivityEvent
        var inputs: ContentEngine.AssemblyInputs
        var decision: ContentEngine.Decision
        var at: Date
    }

    private struct State: Sendable {
        var entries: [String: Entry] = [:]
        /// Event ids in the order kept (an id kept again appears twice; only its entry's time counts).
        var order: Deque<(eventId: String, at: Date)> = []
    }

    private let state = Mutex(State())
    private let taken = Atomic<Int>(0)

    /// Assemblies used when their event was read back, since the start.
    var used: Int { taken.load(ordering: .relaxed) }

    /// Keeps the assembly of an event about to be published (replacing one of the same event id).
    func keep(_ event: ActivityEvent, inputs: ContentEngine.AssemblyInputs, decision: ContentEngine.Decision, at now: Date) {
        state.withLock { state in
            state.entries[event.eventId] = Entry(event: event, inputs: inputs, decision: decision, at: now)
            state.order.append((event.eventId, now))
            Self.trim(&state, now: now)
        }
    }

    /// The assembly kept for this event, and when it was made, if it may be used for it now; the
    /// entry is gone either way.
    /// - Parameter alertWindow: the alert policy's window: an alert of the activity that leaves
    ///   it between the check and now would change the decision to alert.
    func take(
        _ event: ActivityEvent, inputs: ContentEngine.AssemblyInputs, withImages: Bool, now: Date, alertWindow: TimeInterval
    ) -> (decision: ContentEngine.Decision, at: Date)? {
        state.withLock { state in
            defer { Self.trim(&state, now: now) }
            guard let entry = state.entries.removeValue(forKey: event.eventId) else { return nil }
            guard !withImages, entry.event == event, entry.inputs == inputs,
                now >= entry.at, now.timeIntervalSince(entry.at) <= Self.maximumAge,
                !inputs.memory.alertTimes.contains(where: { $0 > entry.at.addingTimeInterval(-alertWindow) && $0 <= now.addingTimeInterval(-alertWindow) })
            else { return nil }
            taken.add(1, ordering: .relaxed)
            return (entry.decision, entry.at)
        }
    }

    /// Entries kept now.
    var count: Int { state.withLock { $0.entries.count } }

    private static func trim(_ state: inout State, now: Date) {
        while let first = state.order.first,
            state.entries.count > capacity || now.timeIntervalSince(first.at) > maximumAge || state.entries[first.eventId]?.at != first.at
        {
            state.order.removeFirst()
            // The entry of this id, unless it was kept again since (its later place in the order keeps it).
            if let entry = state.entries[first.eventId], entry.at == first.at { state.entries[first.eventId] = nil }
        }
    }
}
