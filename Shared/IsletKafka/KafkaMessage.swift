/// A topic and one of its partitions.
public struct KafkaTopicPartition: Hashable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// Where a record is: its partition and offset (of a topic both sides know).
public struct KafkaPosition: Sendable, Hashable, CustomStringConvertible {
    public var partition: Int32
    public var offset: Int64

    public init(partition: Int32, offset: Int64) {
        self.partition = partition
        self.offset = offset
    }

    public var description: String { "\(partition)@\(offset)" }
}

/// A record header: a name and optional bytes.
public struct KafkaHeader: Hashable, Sendable {
    public var name: String
    public var value: [UInt8]?

    public init(name: String, value: [UInt8]?) {
        self.name = name
        self.value = value
    }

    public init(name: String, string: String) {
        self.init(name: name, value: Array(string.utf8))
    }
}

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
