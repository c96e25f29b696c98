import Foundation
import HeapModule
import IsletMessages

/// The scheduled steps of every activity this instance keeps (``ActivityMemory/steps``), by their
/// time: one min-heap of (due, slot, the step's sequence and time), not a timer each, so that a
/// million steps cost 32 bytes each and a pass only what is due. Entries are checked against the
/// activity's memory when they come out: a step superseded, moved or of a forgotten activity
/// (its slot reused) is dropped then. Entries of superseded steps wait for their time (at most
/// 8 hours); should they come to outnumber the steps kept, the owner makes the queue again
/// (``ActivityMemories``).
struct StepQueue: Sendable {
    struct Entry: Comparable, Hashable, Sendable {
        /// When it is due (seconds since the reference date).
        var due: Double
        var slot: Int32
        /// The step it stands for: its sequence and its `at`.
        var sequence: Int64
        var at: Double
        static func < (a: Entry, b: Entry) -> Bool { (a.due, a.slot, a.sequence) < (b.due, b.slot, b.sequence) }
    }

    private var heap = Heap<Entry>()

    /// Finds `step` of the activity in `slot` at its time (or at `at`, when it is looked at again later).
    mutating func insert(_ step: ActivityEvent, slot: Int32, at: Date? = nil) {
        guard let time = step.at else { return }
        heap.insert(
            Entry(due: (at ?? time).timeIntervalSinceReferenceDate, slot: slot, sequence: step.sequence, at: time.timeIntervalSinceReferenceDate))
    }

    /// Puts back an entry taken out.
    mutating func insert(_ entry: Entry) { heap.insert(entry) }

    /// Removes the entries due at `now` (at most `limit`), earliest first: check each against its
    /// activity's steps.
    mutating func popDue(now: Date, limit: Int = .max) -> [Entry] {
        let now = now.timeIntervalSinceReferenceDate
        var due: [Entry] = []
        while due.count < limit, let first = heap.min, first.due <= now { due.append(heap.removeMin()) }
        return due
    }

    /// The earliest entry's time, if any.
    var nextDue: Date? { heap.min.map { Date(timeIntervalSinceReferenceDate: $0.due) } }

    /// Entries held (current and superseded).
    var count: Int { heap.count }
}
