/// What one try of ``KafkaProducer/send(topic:key:value:headers:partition:)`` came to.
enum SendAttempt: Sendable {
    case delivered(KafkaDeliveryReport)
    case queueFull
}
