import IsletKafka
import IsletMessages

/// Where taps go. A tap counts only once its record is acknowledged.
public protocol TapPublisher: Sendable {
    /// Publishes the records (concurrently) and returns, for each in order, `nil` when it was
    /// acknowledged or the error why not.
    func publish(_ records: [TapRecord]) async -> [(any Error)?]
}
