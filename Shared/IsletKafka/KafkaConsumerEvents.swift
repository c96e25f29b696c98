/// Assignments, messages and revocations of a ``KafkaConsumer``, in order.
public struct KafkaConsumerEvents: AsyncSequence, Sendable {
    public typealias Element = KafkaConsumerEvent
    public typealias Failure = Never
    let core: ConsumerCore

    public func makeAsyncIterator() -> Iterator {
        Iterator(state: IteratorState(core: core))
    }

    public struct Iterator: AsyncIteratorProtocol {
        public typealias Failure = Never
        let state: IteratorState

        public mutating func next() async -> KafkaConsumerEvent? {
            await state.next(isolation: nil)
        }

        /// Runs on the caller's actor: taking the next buffered event needs no executor hop.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> KafkaConsumerEvent? {
            await state.next(isolation: actor)
        }
    }

    /// The iterator's local batch. Not shared: an iterator is used by one task at a time.
    final class IteratorState {
        let core: ConsumerCore
        var batch: [KafkaConsumerEvent] = []
        var index = 0
        var generation: UInt64

        init(core: ConsumerCore) {
            precondition(
                core.claimIterator(),
                "a KafkaConsumer's events can be iterated once: use one loop over events, messages or decoded(as:)")
            self.core = core
            self.generation = core.generation
        }

        deinit {
            // Leaving the loop early must not leave a group member behind.
            core.requestStop()
        }

        func next(isolation actor: isolated (any Actor)?) async -> KafkaConsumerEvent? {
            while true {
                if index < batch.count {
                    let current = core.generation
                    if current != generation {
                        // A revocation happened: drop messages of partitions this member lost.
                        generation = current
                        batch = core.stillAssigned(Array(batch[index...]))
                        index = 0
                        continue
                    }
                    defer { index += 1 }
                    return batch[index]
                }
                // The generation comes with the items, read under the same lock that a revocation
                // takes to filter the buffer and bump it: any later revocation is noticed above.
                guard let (taken, takenGeneration) = await core.take(isolation: actor) else { return nil }
                batch = taken
                index = 0
                generation = takenGeneration
            }
        }
    }
}
