import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Where the memory replica is in each partition of `islet.push-requests.v1` and
/// `islet.push-outcomes.v1`: the next offset to read. Every record before it was applied to the
/// engine's memory (``ContentMemoryLoader``), which is what a checkpoint says.
public final class ReadPositions: Sendable {
    private let positions: Mutex<[KafkaTopicPartition: Int64]>

    public init(_ start: [KafkaTopicPartition: Int64] = [:]) { positions = Mutex(start) }

    /// `message` was applied.
    func applied(_ message: KafkaMessage) {
        positions.withLock { $0[message.topicPartition] = message.offset + 1 }
    }

    func start(at start: [KafkaTopicPartition: Int64]) { positions.withLock { $0.merge(start) { current, _ in current } } }

    public var current: [KafkaTopicPartition: Int64] { positions.withLock { $0 } }
}
