import CRdKafka
import Foundation
import Logging

/// librdkafka's rebalance callback, Swift side. Runs on the consumer's poll thread, inside
/// `rd_kafka_consume_batch_queue` or `rd_kafka_consumer_close`.
enum RDKafkaRebalance {
    static func handle(
        rk: OpaquePointer, err: rd_kafka_resp_err_t, partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
        hooks: RDKafkaRebalanceHooks, logger: Logger
    ) {
        let list = partitions.map(topicPartitions(from:)) ?? []
        let cooperative = String(cString: rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE"
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            assign(rk: rk, partitions, cooperative: cooperative, logger: logger)
            logger.debug("partitions assigned", metadata: ["kafka.partitions": "\(list)"])
            hooks.didAssign(list)

        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let lost = rd_kafka_assignment_lost(rk) != 0
            let offsets = hooks.willRevoke(list, lost)
            if lost {
                logger.warning("partitions lost: their offsets are not committed", metadata: ["kafka.partitions": "\(list)"])
            } else {
                if !offsets.isEmpty, let error = storeOffsets(rk: rk, offsets) {
                    logger.warning("storing offsets before revocation failed", metadata: ["kafka.error": "\(error)"])
                }
                commitBeforeRevocation(rk: rk, list, logger: logger)
            }
            unassign(rk: rk, partitions, cooperative: cooperative, logger: logger)
            logger.debug("partitions revoked", metadata: ["kafka.partitions": "\(list)", "kafka.lost": "\(lost)"])
            hooks.didRevoke(list)

        default:
            logger.error("rebalance error", metadata: ["kafka.error": "\(KafkaError(code: .consumer, err))"])
            _ = hooks.willRevoke(list, true)
            rd_kafka_assign(rk, nil)
            hooks.didRevoke(list)
        }
    }

    private static func assign(
        rk: OpaquePointer, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, cooperative: Bool, logger: Logger
    ) {
        if cooperative {
            if let error = rd_kafka_incremental_assign(rk, partitions) {
                logger.error("incremental assign failed", metadata: ["kafka.error": "\(KafkaError(code: .consumer, consuming: error))"])
            }
        } else {
            let result = rd_kafka_assign(rk, partitions)
            if result != RD_KAFKA_RESP_ERR_NO_ERROR {
                logger.error("assign failed", metadata: ["kafka.error": "\(KafkaError(code: .consumer, result))"])
            }
        }
        // A partition paused for backpressure under an earlier assignment starts afresh.
        if let partitions { _ = rd_kafka_resume_partitions(rk, partitions) }
    }

    /// Synchronous: the next owner starts exactly after what was marked processed here.
    /// A transient failure (the coordinator moving) is retried twice; if the commit still
    /// fails, the next owner redoes what was marked since the last commit.
    private static func commitBeforeRevocation(rk: OpaquePointer, _ list: [KafkaTopicPartition], logger: Logger) {
        var attempt = 1
        while true {
            let result = rd_kafka_commit(rk, nil, 0)
            if result == RD_KAFKA_RESP_ERR_NO_ERROR || result == RD_KAFKA_RESP_ERR__NO_OFFSET { return }
            let error = KafkaError(code: .consumer, result)
            guard attempt < 3, error.isRetriable || result == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS else {
                logger.error(
                    "commit on revocation failed: processed messages will be delivered again",
                    metadata: ["kafka.error": "\(error)", "kafka.partitions": "\(list)"])
                return
            }
            attempt += 1
            usleep(100_000)
        }
    }

    private static func unassign(
        rk: OpaquePointer, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, cooperative: Bool, logger: Logger
    ) {
        if cooperative {
            if let error = rd_kafka_incremental_unassign(rk, partitions) {
                logger.error("incremental unassign failed", metadata: ["kafka.error": "\(KafkaError(code: .consumer, consuming: error))"])
            }
        } else {
            rd_kafka_assign(rk, nil)
        }
    }

    static func topicPartitions(from list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [KafkaTopicPartition] {
        let count = Int(list.pointee.cnt)
        guard count > 0, let elems = list.pointee.elems else { return [] }
        return (0..<count).map { i in
            KafkaTopicPartition(topic: String(cString: elems[i].topic), partition: elems[i].partition)
        }
    }

    /// Stores offsets (the next offset to read) in librdkafka; auto-commit sends them.
    static func storeOffsets(rk: OpaquePointer, _ offsets: [KafkaTopicPartition: Int64]) -> KafkaError? {
        let list = rd_kafka_topic_partition_list_new(Int32(offsets.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (tp, offset) in offsets {
            let element = rd_kafka_topic_partition_list_add(list, tp.topic, tp.partition)!
            element.pointee.offset = offset
        }
        let result = rd_kafka_offsets_store(rk, list)
        guard result != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        var failed: [String] = []
        for i in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[i]
            if element.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                failed.append("\(String(cString: element.topic))[\(element.partition)]: \(String(cString: rd_kafka_err2name(element.err)))")
            }
        }
        return KafkaError(code: .consumer, result, context: "offset store failed for \(failed.joined(separator: ", "))")
    }
}

/// A reusable array of message pointers for `rd_kafka_consume_batch_queue`, and the topic-name
/// cache. Owned by one poll thread. `@unchecked Sendable`: it is handed to that thread once.
final class RDKafkaBatchReader: @unchecked Sendable {
    private let buffer: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>?>
    private let capacity: Int
    private var topicNames: [OpaquePointer: String] = [:]

    init(capacity: Int) {
        self.capacity = capacity
        self.buffer = .allocate(capacity: capacity)
        self.buffer.initialize(repeating: nil, count: capacity)
    }

    deinit {
        buffer.deallocate()
    }

    /// Takes up to the capacity's worth of records from the consumer queue, waiting up to
    /// `timeoutMilliseconds` for the first, and appends them as events stamped with their
    /// partition's assignment epoch (`epochs` is asked once, after librdkafka answered). Serves
    /// rebalance and error callbacks meanwhile.
    ///
    /// `rd_kafka_consume_batch_queue` with a timeout waits until the batch is full or the timeout
    /// has passed, even with records in hand: at a few thousand records a second that held every
    /// record up to the whole timeout. So the queue is drained without waiting, and only when it
    /// is empty does the thread wait — for one record (`rd_kafka_consume_queue` returns as soon as
    /// one arrives), then drains again.
    func read(
        from client: RDKafkaClient, timeoutMilliseconds: Int32, into events: inout [KafkaConsumerEvent],
        epochs: () -> [KafkaTopicPartition: UInt64]
    ) -> [KafkaError] {
        guard let queue = client.consumerQueue else { return [] }
        var count = rd_kafka_consume_batch_queue(queue, 0, buffer, capacity)
        if count == 0 {
            guard let first = rd_kafka_consume_queue(queue, timeoutMilliseconds) else {
                let error = rd_kafka_last_error()
                if error == RD_KAFKA_RESP_ERR_NO_ERROR || error == RD_KAFKA_RESP_ERR__TIMED_OUT { return [] }
                return [KafkaError(code: .consumer, error, context: "consume failed")]
            }
            buffer[0] = first
            count = 1 + max(0, rd_kafka_consume_batch_queue(queue, 0, buffer + 1, capacity - 1))
        }
        guard count > 0 else {
            if count < 0 {
                return [KafkaError(code: .consumer, rd_kafka_last_error(), context: "consume failed")]
            }
            return []
        }
        var errors: [KafkaError] = []
        events.reserveCapacity(events.count + count)
        let epochs = epochs()
        var last: (partition: KafkaTopicPartition, epoch: UInt64)?
        for i in 0..<count {
            guard let message = buffer[i] else { continue }
            defer { rd_kafka_message_destroy(message) }
            let m = message.pointee
            if m.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                if m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    // Only with enable.partition.eof (replicas): the partition is read to its end.
                    let partition = KafkaTopicPartition(topic: topicName(m.rkt), partition: m.partition)
                    if epochs[partition] != nil { events.append(.partitionEnd(partition)) }
                } else {
                    errors.append(KafkaError(code: .consumer, m.err, context: "consume"))
                }
                continue
            }
            var converted = convert(message)
            // Batches come partition by partition: look the epoch up when the partition changes.
            if let last, last.partition.partition == converted.partition, last.partition.topic == converted.topic {
                converted.assignmentEpoch = last.epoch
            } else {
                let partition = converted.topicPartition
                // A partition revoked during this call (the rebalance callback runs inside it) may
                // still have messages in the batch: they belong to the next owner now.
                converted.assignmentEpoch = epochs[partition] ?? 0
                last = (partition, converted.assignmentEpoch)
            }
            guard converted.assignmentEpoch != 0 else { continue }
            events.append(.message(converted))
        }
        return errors
    }

    private func convert(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaMessage {
        let m = message.pointee
        let topic = topicName(m.rkt)
        let value = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) }
        let key = m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        var headers: [KafkaHeader] = []
        var rawHeaders: OpaquePointer?
        if rd_kafka_message_headers(message, &rawHeaders) == RD_KAFKA_RESP_ERR_NO_ERROR, let rawHeaders {
            let count = rd_kafka_header_cnt(rawHeaders)
            headers.reserveCapacity(count)
            for index in 0..<count {
                var name: UnsafePointer<CChar>?
                var valuePointer: UnsafeRawPointer?
                var size = 0
                if rd_kafka_header_get_all(rawHeaders, index, &name, &valuePointer, &size) == RD_KAFKA_RESP_ERR_NO_ERROR, let name {
                    headers.append(
                        KafkaHeader(
                            name: String(cString: name),
                            value: valuePointer.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }))
                }
            }
        }
        return KafkaMessage(
            topic: topic, partition: m.partition, offset: m.offset, key: key, value: value,
            timestampMilliseconds: timestamp >= 0 ? timestamp : nil, headers: headers)
    }

    private func topicName(_ rkt: OpaquePointer?) -> String {
        guard let rkt else { return "" }
        let cName = rd_kafka_topic_name(rkt)!
        if let cached = topicNames[rkt], cached.withCString({ strcmp($0, cName) == 0 }) {
            return cached
        }
        let name = String(cString: cName)
        topicNames[rkt] = name
        return name
    }
}

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
