import CRdKafka
import Foundation
import Logging

extension RDKafkaClient {
    func subscribe(_ topics: [String]) throws(KafkaError) {
        let list = rd_kafka_topic_partition_list_new(Int32(topics.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics {
            rd_kafka_topic_partition_list_add(list, topic, RDKafkaConstants.partitionUnassigned)
        }
        let result = rd_kafka_subscribe(handle, list)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .consumer, result, context: "subscribe to \(topics)")
        }
    }

    /// Assigns the partitions of `topics` (all, or those numbered in `partitions`) without a group,
    /// at their first offset or at the first record written at or after `sinceMilliseconds`.
    /// Blocking (asks the cluster for metadata, and for offsets by time).
    func assignReplica(
        _ topics: [String], partitions only: [Int32]?, sinceMilliseconds: Int64?, startOffsets: [Int32: Int64] = [:],
        resumeAt positions: [KafkaTopicPartition: Int64] = [:]
    ) throws(KafkaError) -> [KafkaTopicPartition] {
        var partitions: [KafkaTopicPartition] = []
        for topic in topics {
            guard let count = try partitionCount(topic: topic, timeoutMilliseconds: 10_000) else {
                throw KafkaError(code: .consumer, message: "cannot read \(topic): the topic does not exist")
            }
            let numbers = only ?? Array(0..<Int32(count))
            if let missing = numbers.first(where: { $0 < 0 || $0 >= Int32(count) }) {
                throw KafkaError(code: .consumer, message: "\(topic) has no partition \(missing) (it has \(count))")
            }
            partitions += numbers.map { KafkaTopicPartition(topic: topic, partition: $0) }
        }
        let list = rd_kafka_topic_partition_list_new(Int32(partitions.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for tp in partitions {
            // offsets_for_times takes the timestamp in the offset field and answers the offset there.
            rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)!.pointee.offset = sinceMilliseconds ?? RDKafkaConstants.offsetBeginning
        }
        if sinceMilliseconds != nil {
            let result = rd_kafka_offsets_for_times(handle, list, 10_000)
            guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
                throw KafkaError(code: .consumer, result, context: "offsets by time of \(topics)")
            }
            for i in 0..<Int(list.pointee.cnt) where list.pointee.elems[i].offset < 0 {
                // No record at or after the time: start at the end.
                list.pointee.elems[i].offset = RDKafkaConstants.offsetEnd
            }
        }
        for i in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[i]
            let position = positions[KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition)]
            // Below the log start (deleted by retention) librdkafka resets to the earliest offset.
            if let position {
                // A start position (or where a replaced handle stopped) never before `since` when
                // that names a record: an older one (a stale checkpoint) would read what the
                // replica was told it need not.
                let since = sinceMilliseconds != nil && element.offset >= 0 ? element.offset : 0
                list.pointee.elems[i].offset = max(position, since, 0)
            } else if let offset = startOffsets[element.partition] {
                list.pointee.elems[i].offset = max(offset, 0)
            }
        }
        let result = rd_kafka_assign(handle, list)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .consumer, result, context: "assign \(topics)")
        }
        return partitions
    }

    func pause(_ partitions: [KafkaTopicPartition]) {
        withPartitionList(partitions) { _ = rd_kafka_pause_partitions(handle, $0) }
    }

    func resume(_ partitions: [KafkaTopicPartition]) {
        withPartitionList(partitions) { _ = rd_kafka_resume_partitions(handle, $0) }
    }

    private func withPartitionList(_ partitions: [KafkaTopicPartition], _ body: (UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> Void) {
        let list = rd_kafka_topic_partition_list_new(Int32(partitions.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for tp in partitions { rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition) }
        body(list)
    }

    /// How many records lie between the consumer's position in these partitions (the next offset
    /// it hands over; for a partition it has handed nothing of since it was assigned, the offset in
    /// `startingAt`, if any) and their high watermarks as the last fetch responses reported them
    /// (librdkafka's cache), per partition; those with either not known are left out. With
    /// `askingTheBroker`, a high watermark not in the cache (no fetch answered with records yet) is
    /// asked for: a request, blocking up to a second.
    func lag(
        _ partitions: [KafkaTopicPartition], startingAt: [KafkaTopicPartition: Int64] = [:], askingTheBroker: Bool = false
    ) -> [KafkaTopicPartition: Int64] {
        guard !partitions.isEmpty else { return [:] }
        let list = rd_kafka_topic_partition_list_new(Int32(partitions.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for tp in partitions { rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition) }
        guard rd_kafka_position(handle, list) == RD_KAFKA_RESP_ERR_NO_ERROR else { return [:] }
        var lags: [KafkaTopicPartition: Int64] = [:]
        for i in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[i]
            let partition = KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition)
            guard let position = element.offset >= 0 ? element.offset : startingAt[partition] else { continue }
            var low: Int64 = -1
            var high: Int64 = -1
            let cached = rd_kafka_get_watermark_offsets(handle, element.topic, element.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0
            guard cached
                || (askingTheBroker
                    && rd_kafka_query_watermark_offsets(handle, element.topic, element.partition, &low, &high, 1_000) == RD_KAFKA_RESP_ERR_NO_ERROR
                    && high >= 0)
            else { continue }
            lags[partition] = max(0, high - position)
        }
        return lags
    }

    func storeOffsets(_ offsets: [KafkaTopicPartition: Int64]) -> KafkaError? {
        RDKafkaRebalance.storeOffsets(rk: handle, offsets)
    }

    /// Commits the stored offsets and leaves the group at once (serving the revocation). Blocking.
    func closeConsumer() -> KafkaError? {
        let result = rd_kafka_consumer_close(handle)
        return result == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(code: .consumer, result, context: "close")
    }

    /// The committed offsets of these partitions (the next offset to read; `nil` when none). Blocking.
    func committedOffsets(_ partitions: [KafkaTopicPartition], timeoutMilliseconds: Int32) throws(KafkaError) -> [KafkaTopicPartition: Int64?] {
        let list = rd_kafka_topic_partition_list_new(Int32(partitions.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for tp in partitions { rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition) }
        let result = rd_kafka_committed(handle, list, timeoutMilliseconds)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(code: .consumer, result, context: "committed offsets") }
        var offsets: [KafkaTopicPartition: Int64?] = [:]
        for i in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[i]
            offsets[KafkaTopicPartition(topic: String(cString: element.topic), partition: element.partition)] =
                element.offset >= 0 ? element.offset : nil
        }
        return offsets
    }
}
