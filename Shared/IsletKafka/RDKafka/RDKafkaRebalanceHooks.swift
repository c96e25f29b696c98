/// What a consumer does around a rebalance. librdkafka's rebalance callback performs the C side
/// (assign, store, commit, unassign) and calls these in order.
struct RDKafkaRebalanceHooks: Sendable {
    /// Partitions were assigned (and are now fetched).
    var didAssign: @Sendable (_ partitions: [KafkaTopicPartition]) -> Void
    /// Partitions are about to be revoked: returns the offsets to store for them (the next offset
    /// to read) before the synchronous commit. `lost` means another member may own them already.
    var willRevoke: @Sendable (_ partitions: [KafkaTopicPartition], _ lost: Bool) -> [KafkaTopicPartition: Int64]
    /// Partitions were revoked (after the commit).
    var didRevoke: @Sendable (_ partitions: [KafkaTopicPartition]) -> Void
}
