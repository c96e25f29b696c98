/// A record read from Kafka.
///
/// Its origin (``topic``, ``partition``, ``offset``) is what ``KafkaConsumer/markProcessed(_:)``
/// needs, and what a dead-letter record names.
public struct KafkaMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    /// The key's bytes; `nil` when the record has no key.
    public var key: [UInt8]?
    /// The value's bytes; `nil` for a tombstone (a deletion on a compacted topic).
    public var value: [UInt8]?
    /// The record's timestamp in milliseconds since 1970, when the broker or producer set one.
    public var timestampMilliseconds: Int64?
    public var headers: [KafkaHeader]
    /// Which assignment of its partition this message was read under (0: not read by a consumer).
    /// ``KafkaConsumer/markProcessed(_:)`` refuses a message from an earlier assignment.
    var assignmentEpoch: UInt64 = 0

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?,
        timestampMilliseconds: Int64? = nil, headers: [KafkaHeader] = []
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestampMilliseconds = timestampMilliseconds
        self.headers = headers
    }

    public var topicPartition: KafkaTopicPartition { KafkaTopicPartition(topic: topic, partition: partition) }
    public var position: KafkaPosition { KafkaPosition(partition: partition, offset: offset) }

    /// The key decoded as UTF-8 (keys in Islet are strings); `nil` when absent or not UTF-8.
    public var keyString: String? {
        key.flatMap { String(validating: $0, as: UTF8.self) }
    }

    /// The first header with this name.
    public func header(_ name: String) -> KafkaHeader? {
        headers.first { $0.name == name }
    }
}
