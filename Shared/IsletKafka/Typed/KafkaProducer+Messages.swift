import IsletMessages

extension MessageSink {
    /// Sends an Islet message as JSON to its type's topic (or `topic`, e.g. in tests), under its
    /// key; returns once persisted.
    @discardableResult
    public func send<Message: IsletMessage>(_ message: Message, to topic: String? = nil, headers: [KafkaHeader] = []) async throws
        -> KafkaDeliveryReport
    {
        try await send(topic: topic ?? Message.topic.name, key: message.key, value: try IsletJSON.encode(message), headers: headers, partition: nil)
    }

    /// Sends a tombstone (null value): on a compacted topic it deletes the key.
    @discardableResult
    public func sendTombstone(topic: IsletTopic, key: String) async throws -> KafkaDeliveryReport {
        try await send(topic: topic.name, key: key, value: nil, headers: [], partition: nil)
    }
}
