import IsletMessages

/// Where Islet's producers put a keyed record (``KafkaProducerConfiguration``: librdkafka's
/// murmur2, the Java client's, over the part of the key that names the activity), computed
/// without producing: content-service places the memory of an activity started by push-to-start,
/// whose request is keyed by the push-to-start key, in its activity's partition.
public enum KafkaPartitioner {
    /// The partition of `key` in a topic of `partitions` partitions.
    public static func partition(ofKey key: String, partitions: Int32) -> Int32 {
        precondition(partitions > 0, "a topic has at least one partition")
        return Array(key.utf8).withUnsafeBytes { partition(of: $0, partitions: partitions) }
    }

    /// The partition of a key's bytes.
    static func partition(of key: UnsafeRawBufferPointer, partitions: Int32) -> Int32 {
        RDKafkaPartitioner.murmur2(key, in: hashedKeyRange(key), partitions: partitions)
    }

    /// The part of a key that names the activity (``MessageKey/partitionKeyRange(of:)``): what the
    /// producers' partitioner hashes.
    @Sendable static func hashedKeyRange(_ key: UnsafeRawBufferPointer) -> Range<Int> {
        MessageKey.partitionKeyRange(of: key)
    }
}
