/// Where a service's records come from, in partition order: a Kafka consumer, or in tests a
/// ``MemoryBus`` topic. A service's loop reads ``events``, handles each record, and marks it
/// processed; ``run()`` serves the source until ``shutdown()``.
public protocol MessageSource: Sendable {
    associatedtype Events: AsyncSequence<KafkaConsumerEvent, Never> & Sendable
    var events: Events { get }
    func run() async throws
    func shutdown()
    /// Marks `message`, and every earlier message of its partition, processed; `false` when its
    /// partition is no longer this source's.
    @discardableResult func markProcessed(_ message: KafkaMessage) -> Bool
    /// Whether it can read now (for `/health`).
    var health: KafkaClientHealth { get }
}
