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
