import Foundation
import HeapModule

/// The simulation's one source of chance: SplitMix64, so that a seed replays the same run on any
/// machine. Everything random in a run — latencies, faults, the workload, the dispatcher's retry
/// jitter — draws from it, in the order the run asks.
final class SimRandom: @unchecked Sendable {
    // Only the simulation's thread touches it (the run is one thread, start to end).
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// In [0, 1).
    func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

    func chance(_ probability: Double) -> Bool { unit() < probability }

    func int(_ range: ClosedRange<Int>) -> Int { range.lowerBound + Int(next() % UInt64(range.count)) }

    /// Seconds in [lower, upper).
    func seconds(_ lower: Double, _ upper: Double) -> TimeInterval { lower + (upper - lower) * unit() }

    func pick<T>(_ items: [T]) -> T { items[Int(next() % UInt64(items.count))] }

    /// A UUID drawn from the seed (request ids must replay too).
    func uuid() -> String {
        let (a, b) = (next(), next())
        let hex = String(format: "%016llX%016llX", a, b)
        let c = Array(hex)
        return "\(String(c[0..<8]))-\(String(c[8..<12]))-4\(String(c[13..<16]))-A\(String(c[17..<20]))-\(String(c[20..<32]))"
    }

    /// `bytes` random bytes as lowercase hex (a device token).
    func hex(bytes: Int) -> String {
        var text = ""
        for _ in 0..<bytes { text += String(format: "%02x", next() & 0xff) }
        return text
    }
}

/// Simulated time and what is due in it: events run one at a time, in time order (ties in the
/// order they were scheduled). Nothing runs on a real clock; a run of hours takes milliseconds.
final class SimScheduler {
    private struct Due: Comparable {
        var at: Date
        var sequence: Int
        static func < (lhs: Due, rhs: Due) -> Bool { (lhs.at, lhs.sequence) < (rhs.at, rhs.sequence) }
    }

    private var queue = Heap<Due>()
    private var actions: [Int: () -> Void] = [:]
    private var sequence = 0
    private(set) var now: Date
    private(set) var steps = 0

    init(start: Date) { now = start }

    /// Runs `action` at `at` (never before now).
    func at(_ at: Date, _ action: @escaping () -> Void) {
        sequence += 1
        queue.insert(Due(at: max(at, now), sequence: sequence))
        actions[sequence] = action
    }

    func after(_ seconds: TimeInterval, _ action: @escaping () -> Void) { at(now.addingTimeInterval(seconds), action) }

    var isIdle: Bool { queue.isEmpty }

    /// Runs the next event; `false` when none is left or the next is past `limit`.
    func runNext(until limit: Date) -> Bool {
        guard let next = queue.min, next.at <= limit else { return false }
        queue.removeMin()
        now = next.at
        steps += 1
        actions.removeValue(forKey: next.sequence)?()
        return true
    }
}

/// The last lines of what happened in a run, printed when an invariant breaks.
final class SimTrace {
    private var lines: [String] = []
    private var head = 0
    let capacity: Int
    let start: Date
    var verbose = false

    init(start: Date, capacity: Int = 400) {
        self.start = start
        self.capacity = capacity
    }

    func log(_ now: Date, _ line: @autoclosure () -> String) {
        let text = String(format: "%9.3f ", now.timeIntervalSince(start)) + line()
        if verbose { print(text) }
        if lines.count < capacity {
            lines.append(text)
        } else {
            lines[head] = text
            head = (head + 1) % capacity
        }
    }

    var last: [String] { Array(lines[head...] + lines[..<head]) }
}
