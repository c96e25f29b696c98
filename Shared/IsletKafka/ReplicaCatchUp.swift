/// Tells when a replica consumer has read every partition it was assigned to its end for the first
/// time: the moment a table rebuilt from topics is complete and the service may rely on it.
public struct ReplicaCatchUp: Sendable {
    private var assigned: Set<KafkaTopicPartition> = []
    private var ended: Set<KafkaTopicPartition> = []
    private let topics: Set<String>
    /// Every partition was read to its end at least once.
    public private(set) var caughtUp = false
    /// The partitions the replica was assigned.
    public var assignedPartitions: Set<KafkaTopicPartition> { assigned }

    /// - Parameter topics: topics that must each have partitions assigned before the replica counts
    ///   as caught up (a replica of several topics is not done when the first one is).
    public init(topics: Set<String> = []) {
        self.topics = topics
    }

    /// Takes the replica's next event; `true` exactly once, for the event that completes the catch-up.
    public mutating func note(_ event: KafkaConsumerEvent) -> Bool {
        switch event {
        case .partitionsAssigned(let partitions):
            assigned.formUnion(partitions)
        case .partitionsRevoked(let partitions):
            assigned.subtract(partitions)
        case .partitionEnd(let partition):
            guard !caughtUp else { return false }
            ended.insert(partition)
            if !assigned.isEmpty, ended.isSuperset(of: assigned), topics.isSubset(of: Set(assigned.map(\.topic))) {
                caughtUp = true
                return true
            }
        case .message:
            break
        }
        return false
    }
}

extension MessageSource {
    /// Runs this replica until it is shut down, handing every record to `apply` in partition order
    /// (with whether the replica has caught up yet). `caughtUp` is called once, with the seconds the
    /// catch-up took, when every partition (of every topic in `topics`) was read to its end: the
    /// loop of every service that rebuilds state from a topic.
    public func replay(
        topics: Set<String> = [], caughtUp: (_ seconds: Double) -> Void, apply: (KafkaMessage, _ caughtUp: Bool) -> Void
    ) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.run() }
            let started = ContinuousClock.now
            var catchUp = ReplicaCatchUp(topics: topics)
            for await event in events {
                if catchUp.note(event) { caughtUp((ContinuousClock.now - started) / .seconds(1)) }
                if case .message(let message) = event { apply(message, catchUp.caughtUp) }
            }
            // The loop ends when the consumer stops (shutdown); make sure it does.
            shutdown()
        }
    }
}
