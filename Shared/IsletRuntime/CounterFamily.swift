import Metrics
import Synchronization

/// The counters of one metric label, one per combination of its dimensions' values: each made the
/// first time it is counted (or at start, for the values known then) and kept, so that counting
/// never goes through the metrics factory again. A service's metrics type holds its families,
/// made once at start and handed to the code that counts.
public final class CounterFamily: Sendable {
    public let label: String
    public let dimensions: [String]
    private let counters: Mutex<[[String]: Counter]>

    /// - Parameter known: combinations of values made at start (shown as 0 until counted).
    public init(_ label: String, dimensions: [String], known: [[String]] = []) {
        self.label = label
        self.dimensions = dimensions
        counters = Mutex(
            Dictionary(known.map { ($0, Self.make(label, dimensions, $0)) }, uniquingKeysWith: { first, _ in first }))
    }

    /// The counter of these values (one per dimension, in order).
    public func counter(_ values: [String]) -> Counter {
        precondition(values.count == dimensions.count, "\(label) has \(dimensions.count) dimensions")
        return counters.withLock { counters in
            if let counter = counters[values] { return counter }
            let counter = Self.make(label, dimensions, values)
            counters[values] = counter
            return counter
        }
    }

    public func increment(_ values: String..., by amount: Int = 1) { counter(values).increment(by: amount) }

    private static func make(_ label: String, _ dimensions: [String], _ values: [String]) -> Counter {
        Counter(label: label, dimensions: Array(zip(dimensions, values)))
    }
}
