import CRdKafka

/// librdkafka's answer for one topic of a CreateTopics request.
struct RDKafkaTopicResult {
    var name: String
    var error: KafkaError?
    var alreadyExists: Bool
}

extension RDKafkaClient {
    /// CreateTopics; blocks until the broker answers or the timeout passes. Call from a thread of its own.
    func createTopics(_ topics: [RDKafkaNewTopic], timeoutMilliseconds: Int32) throws(KafkaError) -> [RDKafkaTopicResult] {
        var errstr = [CChar](repeating: 0, count: 512)
        var newTopics: [OpaquePointer?] = []
        defer { for topic in newTopics { rd_kafka_NewTopic_destroy(topic) } }
        for topic in topics {
            guard let newTopic = rd_kafka_NewTopic_new(topic.name, topic.partitions, topic.replicationFactor, &errstr, errstr.count)
            else {
                throw KafkaError(code: .admin, message: "topic \(topic.name): \(cBufferString(errstr))")
            }
            newTopics.append(newTopic)
            for (key, value) in topic.configs.sorted(by: { $0.key < $1.key }) {
                let result = rd_kafka_NewTopic_set_config(newTopic, key, value)
                guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
                    throw KafkaError(code: .admin, result, context: "topic \(topic.name) config \(key)")
                }
            }
        }

        let event = try adminRequest(RD_KAFKA_ADMIN_OP_CREATETOPICS, "CreateTopics", timeoutMilliseconds: timeoutMilliseconds) {
            options, queue in
            newTopics.withUnsafeMutableBufferPointer { buffer in
                rd_kafka_CreateTopics(handle, buffer.baseAddress, buffer.count, options, queue)
            }
        }
        defer { rd_kafka_event_destroy(event) }
        guard let result = rd_kafka_event_CreateTopics_result(event) else {
            throw KafkaError(code: .admin, message: "CreateTopics answered with an unexpected event")
        }
        var count = 0
        guard let topicResults = rd_kafka_CreateTopics_result_topics(result, &count) else { return [] }
        return (0..<count).map { i in
            let topicResult = topicResults[i]
            let name = String(cString: rd_kafka_topic_result_name(topicResult))
            let err = rd_kafka_topic_result_error(topicResult)
            if err == RD_KAFKA_RESP_ERR_NO_ERROR {
                return RDKafkaTopicResult(name: name, error: nil, alreadyExists: false)
            }
            if err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                return RDKafkaTopicResult(name: name, error: nil, alreadyExists: true)
            }
            let detail = rd_kafka_topic_result_error_string(topicResult).map { String(cString: $0) }
            return RDKafkaTopicResult(name: name, error: KafkaError(code: .admin, err, context: "topic \(name)\(detail.map { ": \($0)" } ?? "")"), alreadyExists: false)
        }
    }

    /// Submits one admin request and waits for its result event (the caller destroys it); a
    /// request-level error is thrown. Blocking.
    private func adminRequest(
        _ operation: rd_kafka_admin_op_t, _ what: String, timeoutMilliseconds: Int32,
        submit: (_ options: OpaquePointer?, _ queue: OpaquePointer?) -> Void
    ) throws(KafkaError) -> OpaquePointer {
        var errstr = [CChar](repeating: 0, count: 512)
        let options = rd_kafka_AdminOptions_new(handle, operation)
        defer { rd_kafka_AdminOptions_destroy(options) }
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMilliseconds, &errstr, errstr.count)
        if operation == RD_KAFKA_ADMIN_OP_CREATETOPICS {
            _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMilliseconds, &errstr, errstr.count)
        }
        let queue = rd_kafka_queue_new(handle)
        defer { rd_kafka_queue_destroy(queue) }
        submit(options, queue)
        // The request timeout bounds the answer; a little slack covers the local round trip.
        guard let event = rd_kafka_queue_poll(queue, timeoutMilliseconds &+ 5_000) else {
            throw KafkaError(code: .timeout, message: "no answer to \(what) within \(timeoutMilliseconds) ms")
        }
        let eventError = rd_kafka_event_error(event)
        guard eventError == RD_KAFKA_RESP_ERR_NO_ERROR else {
            rd_kafka_event_destroy(event)
            throw KafkaError(code: .admin, eventError, context: what)
        }
        return event
    }

    /// A topic's configuration entries (name → value) as the broker reports them. Blocking.
    func topicConfigs(topic: String, timeoutMilliseconds: Int32) throws(KafkaError) -> [String: String] {
        var resources: [OpaquePointer?] = [rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic)]
        defer { rd_kafka_ConfigResource_destroy_array(&resources, resources.count) }
        let event = try adminRequest(RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, "DescribeConfigs of \(topic)", timeoutMilliseconds: timeoutMilliseconds) {
            options, queue in
            resources.withUnsafeMutableBufferPointer { buffer in
                rd_kafka_DescribeConfigs(handle, buffer.baseAddress, buffer.count, options, queue)
            }
        }
        defer { rd_kafka_event_destroy(event) }
        guard let result = rd_kafka_event_DescribeConfigs_result(event) else {
            throw KafkaError(code: .admin, message: "DescribeConfigs answered with an unexpected event")
        }
        var resourceCount = 0
        guard let described = rd_kafka_DescribeConfigs_result_resources(result, &resourceCount), resourceCount > 0 else { return [:] }
        let resource = described[0]
        let resourceError = rd_kafka_ConfigResource_error(resource)
        guard resourceError == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .admin, resourceError, context: "DescribeConfigs of \(topic)")
        }
        var entryCount = 0
        guard let entries = rd_kafka_ConfigResource_configs(resource, &entryCount) else { return [:] }
        var configs: [String: String] = [:]
        for i in 0..<entryCount {
            let name = String(cString: rd_kafka_ConfigEntry_name(entries[i]))
            configs[name] = rd_kafka_ConfigEntry_value(entries[i]).map { String(cString: $0) }
        }
        return configs
    }

    /// The number of partitions of a topic from the cluster's metadata; `nil` when the topic does
    /// not exist. Blocking.
    func partitionCount(topic: String, timeoutMilliseconds: Int32) throws(KafkaError) -> Int? {
        guard let rkt = topicHandle(topic) else { throw KafkaError(code: .admin, message: "no topic handle for \(topic)") }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let result = rd_kafka_metadata(handle, 0, rkt, &metadata, timeoutMilliseconds)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
            throw KafkaError(code: .admin, result, context: "metadata of \(topic)")
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        guard metadata.pointee.topic_cnt > 0, let topicMetadata = metadata.pointee.topics else { return nil }
        let entry = topicMetadata[0]
        if entry.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART { return nil }
        guard entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .admin, entry.err, context: "metadata of \(topic)")
        }
        return Int(entry.partition_cnt)
    }

    /// The low and high watermarks (first offset, next offset to be written) of a partition. Blocking.
    func watermarks(topic: String, partition: Int32, timeoutMilliseconds: Int32) throws(KafkaError) -> (low: Int64, high: Int64) {
        var low: Int64 = 0
        var high: Int64 = 0
        let result = rd_kafka_query_watermark_offsets(handle, topic, partition, &low, &high, timeoutMilliseconds)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(code: .admin, result, context: "watermarks of \(topic)[\(partition)]")
        }
        return (low, high)
    }
}
