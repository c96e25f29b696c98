import CRdKafka
import Foundation

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
