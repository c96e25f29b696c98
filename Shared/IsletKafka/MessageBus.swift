import Synchronization

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

/// A member of a consumer group: a ``MessageSource`` whose partitions the group gives and takes
/// back (``KafkaConsumer``, or in tests a ``MemoryBus`` member). Assignment and revocation arrive
/// in ``events`` between the records; a service finishes its work on partitions about to go in the
/// revocation handler, and stops at once on those lost.
public protocol GroupMessageSource: MessageSource {
    /// ``run()``; with `stoppingOnGracefulShutdown` false, a graceful shutdown of the service group
    /// does not stop the source: the service calls ``shutdown()`` once its work in flight is done.
    func run(stoppingOnGracefulShutdown: Bool) async throws
    /// Called with partitions about to be revoked (a rebalance, or the close at shutdown), before
    /// their marks are committed; the group waits for it, at most `timeout`.
    func onRevocation(timeout: Duration, _ handler: @escaping @Sendable ([KafkaTopicPartition]) async -> Void)
    /// Called at once with partitions the group gave to others without the revocation handler
    /// (the session expired).
    func onLoss(_ handler: @escaping @Sendable ([KafkaTopicPartition]) -> Void)
    /// Whether `message`'s partition is still this member's, under the assignment it was read in,
    /// and not being revoked.
    func isCurrent(_ message: KafkaMessage) -> Bool
}

/// Where a service's records go: a Kafka producer, or in tests a ``MemoryBus``. Returns once the
/// record is persisted.
public protocol MessageSink: Sendable {
    @discardableResult
    func send(topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader], partition: Int32?) async throws -> KafkaDeliveryReport
    /// Hands one record over and returns at once; `onDelivery` is then called exactly once, later,
    /// with where it was persisted or why not. Records handed over one after the other are
    /// persisted in that order. Throws, without calling `onDelivery`, when the record was not taken
    /// (a full queue: `isQueueFull`, take ``waitForCapacity()`` and try again).
    func produce(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader], partition: Int32?,
        onDelivery: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) throws(KafkaError)
    /// Returns once a record refused for a full queue may be handed over again.
    func waitForCapacity() async
}

extension KafkaConsumer: GroupMessageSource {}
extension KafkaProducer: MessageSink {}
