/// Where a produced record was persisted (acks=all): its partition and offset.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    /// The offset the broker gave the record, when known.
    public var offset: Int64?

    public init(topic: String, partition: Int32, offset: Int64?) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }

    /// Where the record is, when the broker said.
    public var position: KafkaPosition? { offset.map { KafkaPosition(partition: partition, offset: $0) } }
}
