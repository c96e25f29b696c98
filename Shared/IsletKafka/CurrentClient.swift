import Synchronization

/// The consumer's librdkafka handle, which the poll thread replaces after a fatal error.
///
/// Kept apart from the ``ConsumerMachine`` (which knows nothing of librdkafka): a slot of its own
/// that other threads read — ``KafkaConsumer/shutdown()`` wakes the handle up, the health probe
/// and ``KafkaConsumer/committedOffsets(for:timeout:)`` borrow it — and only the poll thread writes.
final class CurrentClient: Sendable {
    private let slot: Mutex<RDKafkaClient>
    init(_ client: RDKafkaClient) { slot = Mutex(client) }
    var client: RDKafkaClient {
        get { slot.withLock { $0 } }
        set { slot.withLock { $0 = newValue } }
    }
}
