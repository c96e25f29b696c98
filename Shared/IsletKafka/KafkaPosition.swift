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
