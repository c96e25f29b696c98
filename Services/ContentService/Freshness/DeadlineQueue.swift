import Foundation
import HeapModule

/// Activities (by their slot in the engine's memory) by their next deadline: a min-heap of (due,
/// slot), and each slot's current deadline. An entry counts when its due is the slot's current
/// one; the others (superseded, or of a forgotten activity) are dropped when they come out. An
/// activity whose deadline moves later keeps its earlier entry (no push on every event or outcome:
/// the heap stays about as large as the activities remembered): it comes out early, is looked at,
/// and is scheduled again. 16 bytes an entry and 8 a slot.
struct DeadlineQueue: Sendable {
    private struct Entry: Comparable, Sendable {
        var due: Double
        var slot: Int32
        static func < (a: Entry, b: Entry) -> Bool { (a.due, a.slot) < (b.due, b.slot) }
    }
    private var heap = Heap<Entry>()
    /// By slot: its current deadline (seconds since the reference date), or infinity for none.
    private var scheduled: [Double] = []
    private var scheduledCount = 0

    /// Makes sure `slot` comes out no later than `due`: its current entry is kept when it is earlier
    /// and not already due (a due one would be looked at again for nothing).
    mutating func schedule(_ slot: Int32, at date: Date, now: Date) {
        let (index, due, now) = (Int(slot), date.timeIntervalSinceReferenceDate, now.timeIntervalSinceReferenceDate)
        if index >= scheduled.count { scheduled.append(contentsOf: repeatElement(.infinity, count: index + 1 - scheduled.count)) }
        let current = scheduled[index]
        if current != .infinity, current <= due, current > now || due <= now { return }
        if current == .infinity { scheduledCount += 1 }
        scheduled[index] = due
        heap.insert(Entry(due: due, slot: slot))
        // Superseded entries wait for their time to be dropped. Should they come to outnumber the
        // current ones (deadlines moved earlier again and again), the heap is rebuilt: memory
        // stays bounded, and the rebuild costs no more than the insertions that made it necessary.
        if heap.count > 2 * scheduledCount + 1_024 {
            heap = Heap(scheduled.enumerated().compactMap { $0.element == .infinity ? nil : Entry(due: $0.element, slot: Int32($0.offset)) })
        }
    }

    /// `slot` has no deadline any more.
    mutating func cancel(_ slot: Int32) {
        let index = Int(slot)
        guard index < scheduled.count, scheduled[index] != .infinity else { return }
        scheduled[index] = .infinity
        scheduledCount -= 1
    }

    /// Removes the activities due at `now` (each once), earliest first. Schedule them again after
    /// this returns: one scheduled at or before `now` comes out of the next call.
    mutating func popDue(now date: Date) -> [Int32] {
        let now = date.timeIntervalSinceReferenceDate
        var slots: [Int32] = []
        while let first = heap.min, first.due <= now {
            let entry = heap.removeMin()
            guard scheduled[Int(entry.slot)] == entry.due else { continue }
            cancel(entry.slot)
            slots.append(entry.slot)
        }
        return slots
    }

    /// Entries held (current and superseded).
    var count: Int { heap.count }
}
