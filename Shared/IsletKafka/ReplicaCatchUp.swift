/// Tells when a replica consumer has read every partition it was assigned to its end for the first
/// time: the moment a table rebuilt from topics is complete and the service may rely on it.
public struct ReplicaCatchUp: Sendable {
    private var assigned: Set<KafkaTopicPartition> = []
    private var ended: Set<KafkaTopicPartition> = []
    private let topics: Set<String>
    /// Every partition was read to its end at least once.
    public private(set) var caughtUp = false

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
