/// One topic to create, in librdkafka's terms.
struct RDKafkaNewTopic {
    var name: String
    var partitions: Int32
    var replicationFactor: Int32
    var configs: [String: String]
}
