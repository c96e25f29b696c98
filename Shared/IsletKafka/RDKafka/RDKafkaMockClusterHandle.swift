import CRdKafka

/// librdkafka's in-process mock cluster (`rdkafka_mock.h`) and the client handle that owns it.
///
/// `@unchecked Sendable`: the mock cluster API is thread-safe (every call is posted to the
/// cluster's own thread); the pointers never change.
final class RDKafkaMockClusterHandle: @unchecked Sendable {
    private let owner: OpaquePointer
    private let cluster: OpaquePointer
    let bootstrapServers: String

    init(brokers: Int32) throws(KafkaError) {
        var errstr = [CChar](repeating: 0, count: 512)
        let conf = rd_kafka_conf_new()!
        guard let owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .configuration, message: cBufferString(errstr))
        }
        guard let cluster = rd_kafka_mock_cluster_new(owner, brokers) else {
            rd_kafka_destroy(owner)
            throw KafkaError(code: .configuration, message: "could not create a mock cluster")
        }
        self.owner = owner
        self.cluster = cluster
        self.bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(owner)
    }

    func createTopic(_ name: String, partitions: Int32, replicationFactor: Int32) throws(KafkaError) {
        let result = rd_kafka_mock_topic_create(cluster, name, partitions, replicationFactor)
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(code: .admin, result, context: "mock topic \(name)") }
    }

    func setBroker(_ id: Int32, up: Bool) {
        if up {
            _ = rd_kafka_mock_broker_set_up(cluster, id)
        } else {
            _ = rd_kafka_mock_broker_set_down(cluster, id)
        }
    }

    func setBrokerRoundTripTime(_ id: Int32, milliseconds: Int32) {
        _ = rd_kafka_mock_broker_set_rtt(cluster, id, milliseconds)
    }

    func setPartitionLeader(topic: String, partition: Int32, broker: Int32) {
        _ = rd_kafka_mock_partition_set_leader(cluster, topic, partition, broker)
    }

    /// The next requests of this API key fail with these errors, in order (cluster-wide).
    func pushRequestErrors(apiKey: Int16, errors: [Int32]) {
        let codes = errors.map { rd_kafka_resp_err_t(rawValue: $0) }
        codes.withUnsafeBufferPointer { buffer in
            rd_kafka_mock_push_request_errors_array(cluster, apiKey, buffer.count, buffer.baseAddress)
        }
    }

    /// librdkafka's name for an error code, e.g. `NOT_LEADER_FOR_PARTITION`.
    static func errorName(_ code: Int32) -> String {
        String(cString: rd_kafka_err2name(rd_kafka_resp_err_t(rawValue: code)))
    }
}
