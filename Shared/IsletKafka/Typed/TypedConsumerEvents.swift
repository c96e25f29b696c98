import IsletMessages

/// What a typed consumer delivers, in order.
public enum TypedConsumerEvent<Message: IsletMessage>: Sendable {
    case partitionsAssigned([KafkaTopicPartition])
    /// A decoded, valid message and the record it came from (mark the record processed).
    case message(Message, KafkaMessage)
    /// A null value: on a compacted topic, the key was deleted.
    case tombstone(key: String?, KafkaMessage)
    /// A replica read the partition to its end (``KafkaConsumerEvent/partitionEnd(_:)``).
    case partitionEnd(KafkaTopicPartition)
    /// A record that did not decode or validate, now persisted on the dead-letter topic. Mark it
    /// processed like a message, in its partition's order: marking covers every earlier record of
    /// the partition, so a loop with several records in flight marks it once those are done.
    case deadLettered(KafkaMessage)
    case partitionsRevoked([KafkaTopicPartition])
}

extension MessageSource {
    /// The consumer's events with records decoded as `Message`; records that do not decode or
    /// validate go to the dead-letter topic and come as ``TypedConsumerEvent/deadLettered(_:)``
    /// once persisted there, for the loop to mark processed in order.
    public func decoded<Message: IsletMessage>(as type: Message.Type, deadLetters: DeadLetterWriter) -> TypedConsumerEvents<Message, Events> {
        TypedConsumerEvents(events: events, deadLetters: deadLetters)
    }
}

/// A consumer's events, decoded. Throws only if a dead letter was being written when the producer
/// shut down or the task was cancelled.
public struct TypedConsumerEvents<Message: IsletMessage, Events: AsyncSequence<KafkaConsumerEvent, Never> & Sendable>: AsyncSequence, Sendable {
    public typealias Element = TypedConsumerEvent<Message>
    let events: Events
    let deadLetters: DeadLetterWriter

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: events.makeAsyncIterator(), deadLetters: deadLetters)
    }

    public struct Iterator: AsyncIteratorProtocol {
        var base: Events.AsyncIterator
        let deadLetters: DeadLetterWriter

        public mutating func next() async throws -> TypedConsumerEvent<Message>? {
            try await next(isolation: nil)
        }

        /// Runs on the caller's actor; suspends only to wait for records or to write a dead letter.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> TypedConsumerEvent<Message>? {
            while let event = await base.next(isolation: actor) {
                switch event {
                case .partitionsAssigned(let partitions):
                    return .partitionsAssigned(partitions)
                case .partitionsRevoked(let partitions):
                    return .partitionsRevoked(partitions)
                case .partitionEnd(let partition):
                    return .partitionEnd(partition)
                case .message(let raw):
                    if raw.value == nil { return .tombstone(key: raw.keyString, raw) }
                    switch DeadLetterWriter.check(Message.self, raw) {
                    case .success(let message):
                        return .message(message, raw)
                    case .failure(let rejection):
                        try await deadLetters.send(raw, reason: rejection.reason, detail: rejection.detail)
                        return .deadLettered(raw)
                    }
                }
            }
            return nil
        }
    }
}
