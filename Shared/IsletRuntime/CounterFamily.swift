import Metrics
import Synchronization

/// The counters of one metric label, one per combination of its dimensions' values, made once:
/// those known at start when the family is made (shown as 0 until counted, and counted without a
/// lock), any other the first time it is counted (then kept). Counting never goes through the
/// metrics factory again (which takes its registry's lock and formats the labels). A service's
/// metrics type holds its families, made once at start and handed to the parts that count.
public final class CounterFamily: Sendable {
    public let label: String
    public let dimensions: [String]
    private let known: [String: Counter]
    private let others = Mutex<[String: Counter]>([:])

    /// - Parameter known: combinations of values (one per dimension, in order) made at start.
    public init(_ label: String, dimensions: [String], known: [[String]] = []) {
        self.label = label
        self.dimensions = dimensions
        self.known = Dictionary(known.map { (Self.key($0), Self.make(label, dimensions, $0)) }, uniquingKeysWith: { first, _ in first })
    }

    /// The counter of these values (one per dimension, in order).
    public func counter(_ values: [String]) -> Counter {
        precondition(values.count == dimensions.count, "\(label) has \(dimensions.count) dimensions")
        let key = Self.key(values)
        if let counter = known[key] { return counter }
        return others.withLock { others in
            if let counter = others[key] { return counter }
            let counter = Self.make(label, dimensions, values)
            others[key] = counter
            return counter
        }
    }

    public func increment(_ values: String..., by amount: Int = 1) { counter(values).increment(by: amount) }

    private static func key(_ values: [String]) -> String { values.count == 1 ? values[0] : values.joined(separator: "\u{1F}") }

    private static func make(_ label: String, _ dimensions: [String], _ values: [String]) -> Counter {
        Counter(label: label, dimensions: Array(zip(dimensions, values)))
    }
}
