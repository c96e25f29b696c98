/// Only the messages of a consumer's events.
public struct KafkaConsumerMessages: AsyncSequence, Sendable {
    public typealias Element = KafkaMessage
    public typealias Failure = Never
    let events: KafkaConsumerEvents

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: events.makeAsyncIterator())
    }

    public struct Iterator: AsyncIteratorProtocol {
        public typealias Failure = Never
        var base: KafkaConsumerEvents.Iterator

        public mutating func next() async -> KafkaMessage? {
            await next(isolation: nil)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> KafkaMessage? {
            while let event = await base.next(isolation: actor) {
                if case .message(let message) = event { return message }
            }
            return nil
        }
    }
}
