/// Where a service's records go: a Kafka producer, or in tests a ``MemoryBus``. Returns once the
/// record is persisted.
public protocol MessageSink: Sendable {
    @discardableResult
    func send(topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader], partition: Int32?) async throws -> KafkaDeliveryReport
    /// Hands one record over and returns at once; `onDelivery` is then called exactly once, later,
    /// with where it was persisted or why not. Records handed over one after the other are
    /// persisted in that order. Throws, without calling `onDelivery`, when the record was not taken
    /// (a full queue: `isQueueFull`, take ``waitForCapacity()`` and try again).
    func produce(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader], partition: Int32?,
        onDelivery: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) throws(KafkaError)
    /// Returns once a record refused for a full queue may be handed over again.
    func waitForCapacity() async
}

extension KafkaProducer: MessageSink {}
