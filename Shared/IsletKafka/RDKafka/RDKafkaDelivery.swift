/// One record's delivery handler. librdkafka carries it as the message's opaque (retained when the
/// record is accepted) and hands it back in the delivery report, which calls it exactly once.
final class RDKafkaDelivery: Sendable {
    let topic: String
    let handler: @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void

    init(topic: String, handler: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        self.topic = topic
        self.handler = handler
    }
}
