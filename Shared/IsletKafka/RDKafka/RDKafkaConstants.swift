enum RDKafkaConstants {
    static let destroyWithoutConsumerClose: Int32 = 0x8  // RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE
    static let messageFlagCopy: Int32 = 0x2  // RD_KAFKA_MSG_F_COPY
    static let purgeQueue: Int32 = 0x1  // RD_KAFKA_PURGE_F_QUEUE
    static let purgeInFlight: Int32 = 0x2  // RD_KAFKA_PURGE_F_INFLIGHT
    static let partitionUnassigned: Int32 = -1  // RD_KAFKA_PARTITION_UA
    static let offsetBeginning: Int64 = -2  // RD_KAFKA_OFFSET_BEGINNING
    static let offsetEnd: Int64 = -1  // RD_KAFKA_OFFSET_END
}
