import IsletKafka
import IsletMessages

/// A table built from `islet.tokens.v1`: ``TokenTable`` (token-registry's, with its indexes) or
/// ``PartitionTokens`` (the compact one the sending services keep).
public protocol TokenTopicTable: Sendable {
    /// Applies a record read from `partition` at `offset` under its topic key `key`.
    @discardableResult
    func apply(_ record: TokenRecord, key: String, partition: Int32, offset: Int64) -> Bool
    /// A tombstone of `key` read from `partition` at `offset`.
    func remove(key: String, partition: Int32, offset: Int64)
    var count: Int { get }
}

extension TokenTable: TokenTopicTable {
    @discardableResult
    public func apply(_ record: TokenRecord, key: String, partition: Int32, offset: Int64) -> Bool {
        apply(record, key: key, at: Position(partition: partition, offset: offset))
    }

    public func remove(key: String, partition: Int32, offset: Int64) {
        remove(key: key, at: Position(partition: partition, offset: offset))
    }
}

extension PartitionTokens: TokenTopicTable {}
