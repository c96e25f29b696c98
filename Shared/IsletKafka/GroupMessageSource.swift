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

extension KafkaConsumer: GroupMessageSource {}
