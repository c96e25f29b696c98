import Logging

/// Reads topics from their start as a replica (no group, nothing committed) until the caller has
/// what it wants or the time is up: the demo's and the tests' way to look at what is on a topic.
public enum TopicSnapshot {
    /// What was read so far.
    public struct Progress: Sendable {
        /// Every record read, in the order the partitions delivered them.
        public internal(set) var messages: [KafkaMessage] = []
        /// The partitions assigned to the reader.
        public internal(set) var assigned: Set<KafkaTopicPartition> = []
        /// Partitions read to their end since their last record.
        public internal(set) var atEnd: Set<KafkaTopicPartition> = []
        /// The record just read (`nil` when the last event was not a record).
        public internal(set) var latest: KafkaMessage?
        /// The reader stopped because the time was up, not because the caller was satisfied.
        public internal(set) var timedOut = false
        let topics: Set<String>

        /// Every partition of every topic is read to its current end (none has had a record since).
        public var caughtUp: Bool {
            !assigned.isEmpty && atEnd.isSuperset(of: assigned) && topics.isSubset(of: Set(assigned.map(\.topic)))
        }

        /// Every partition of every topic was read to its end at least once: all that was there when
        /// the read began is read, even while more keeps arriving (``ReplicaCatchUp``'s rule).
        public var reachedEnds: Bool { catchUp.caughtUp }
        var catchUp: ReplicaCatchUp

        mutating func note(_ event: KafkaConsumerEvent) {
            latest = nil
            _ = catchUp.note(event)
            switch event {
            case .partitionsAssigned(let partitions): assigned.formUnion(partitions)
            case .partitionsRevoked(let partitions): assigned.subtract(partitions)
            case .partitionEnd(let partition): atEnd.insert(partition)
            case .message(let message):
                atEnd.remove(message.topicPartition)
                messages.append(message)
                latest = message
            }
        }
    }

    /// Reads `topics` from the start until `done` says so (by default: every partition read to its
    /// end) or `timeout` passed; returns what was read (``Progress/timedOut`` tells which).
    public static func read(
        _ topics: [String], bootstrapServers: String, timeout: Duration, logger: Logger,
        until done: @escaping @Sendable (Progress) throws -> Bool = { $0.caughtUp }
    ) async throws -> Progress {
        let reader = try KafkaConsumer(configuration: .replica(bootstrapServers: bootstrapServers, topics: topics), logger: logger)
        return try await reader.reading(atMost: timeout) { reader in
            var progress = Progress(topics: Set(topics), catchUp: ReplicaCatchUp(topics: Set(topics)))
            for await event in reader.events {
                progress.note(event)
                if try done(progress) { return progress }
            }
            progress.timedOut = true
            return progress
        }
    }
}

extension MessageSource {
    /// Runs this consumer (a replica, read for a while) while `read` goes through its events, for at
    /// most `timeout`: then the consumer is shut down, its events end, and `read` returns what it
    /// has. Returns `read`'s answer; the consumer is shut down when it returns.
    public func reading<T: Sendable>(atMost timeout: Duration, _ read: @escaping @Sendable (Self) async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await self.run()
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                self.shutdown()
                return nil
            }
            group.addTask { try await read(self) }
            var result: T?
            while let next = try await group.next() {
                if let next, result == nil {
                    result = next
                    self.shutdown()
                    group.cancelAll()
                }
            }
            guard let result else { throw KafkaError(code: .consumer, message: "the reading ended without an answer") }
            return result
        }
    }
}
