import CRdKafka

/// librdkafka's murmur2 partitioner (the Java client's), computed without producing.
enum RDKafkaPartitioner {
    /// The partition of `key`'s bytes in `range`, in a topic of `partitions` partitions.
    static func murmur2(_ key: UnsafeRawBufferPointer, in range: Range<Int>, partitions: Int32) -> Int32 {
        // murmur2 only hashes the key: the topic and the opaques are not looked at.
        rd_kafka_msg_partitioner_murmur2(nil, key.baseAddress.map { $0 + range.lowerBound }, range.count, partitions, nil, nil)
    }
}
