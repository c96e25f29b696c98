/// What a ``KafkaConsumer`` delivers, in order.
public enum KafkaConsumerEvent: Sendable {
    /// Partitions now belong to this member: rebuild their state before handling their messages
    /// (which follow this event).
    case partitionsAssigned([KafkaTopicPartition])
    /// A record.
    case message(KafkaMessage)
    /// A replica (``KafkaConsumerConfiguration/Membership/replica``) read everything the partition
    /// held: it is caught up. Comes again each time new records were read to the end.
    case partitionEnd(KafkaTopicPartition)
    /// Partitions left this member: what was marked processed is committed; drop their state.
    /// Messages of these partitions not yet handled are not delivered any more.
    case partitionsRevoked([KafkaTopicPartition])
}
