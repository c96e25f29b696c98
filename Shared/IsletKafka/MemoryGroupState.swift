/// A consumer group of a ``MemoryBus``: its members in join order, what each holds, and the
/// offsets it committed.
struct MemoryGroupState {
    struct Member {
        /// This membership's id (a handle that joins again is a new member).
        let name: String
        let handle: ObjectIdentifier
        let continuation: AsyncStream<KafkaConsumerEvent>.Continuation
        let topics: [String]
        let autoCommit: Bool
        let revocation: MemoryGroupMember.Revocation?
        let loss: (@Sendable ([KafkaTopicPartition]) -> Void)?
        /// Killed: it holds its partitions (and nothing is delivered to it) until its session expires.
        var crashed = false
        /// Each partition held, with the assignment's epoch.
        var assigned: [KafkaTopicPartition: UInt64] = [:]
        var positions: [KafkaTopicPartition: Int64] = [:]
        var revoking: Set<KafkaTopicPartition> = []
        var marks: [KafkaTopicPartition: Int64] = [:]

        func isCurrent(_ message: KafkaMessage) -> Bool {
            assigned[message.topicPartition] == message.assignmentEpoch && !revoking.contains(message.topicPartition)
        }
    }

    var members: [Member] = []
    var rebalanceProtocol = MemoryBus.RebalanceProtocol.cooperative
    var committed: [KafkaTopicPartition: Int64] = [:]
    var nextEpoch: UInt64 = 1
    /// The last of the group's changes (joins, leaves, rebalances), which run one after another.
    var changes: Task<Void, Never>?

    func index(of name: String) -> Int? { members.firstIndex { $0.name == name } }

    /// Hands what is new in `partition` to the member that holds it (not while it is being revoked).
    mutating func deliver(_ partition: KafkaTopicPartition, records: [KafkaMessage]) {
        for index in members.indices where !members[index].crashed {
            guard let epoch = members[index].assigned[partition], !members[index].revoking.contains(partition),
                var position = members[index].positions[partition]
            else { continue }
            while position < records.count {
                var message = records[Int(position)]
                message.assignmentEpoch = epoch
                members[index].continuation.yield(.message(message))
                position += 1
            }
            members[index].positions[partition] = position
        }
    }

    /// Marks a member's record processed (and commits it when the member commits at once).
    mutating func mark(_ message: KafkaMessage, by name: String) -> Bool {
        guard let index = index(of: name), members[index].assigned[message.topicPartition] == message.assignmentEpoch else { return false }
        let next = max(members[index].marks[message.topicPartition] ?? .min, message.offset + 1)
        members[index].marks[message.topicPartition] = next
        if members[index].autoCommit { committed[message.topicPartition] = next }
        return true
    }

    /// What each member that is not crashed should hold: as even as possible, keeping what each
    /// holds (sticky), the rest to the members with fewest. Partitions of a crashed member stay its.
    func target(partitions all: [KafkaTopicPartition]) -> [String: Set<KafkaTopicPartition>] {
        let live = members.filter { !$0.crashed }
        guard !live.isEmpty else { return [:] }
        let held = Set(members.filter(\.crashed).flatMap(\.assigned.keys))
        let free = all.filter { !held.contains($0) }
        let base = free.count / live.count
        let extra = free.count % live.count
        var target: [String: Set<KafkaTopicPartition>] = [:]
        var taken: Set<KafkaTopicPartition> = []
        for (rank, member) in live.enumerated() {
            let quota = base + (rank < extra ? 1 : 0)
            let kept = member.assigned.keys.filter { free.contains($0) && member.topics.contains($0.topic) }.sorted(by: MemoryBus.order).prefix(quota)
            target[member.name] = Set(kept)
            taken.formUnion(kept)
        }
        for partition in free where !taken.contains(partition) {
            let readers = live.enumerated().filter { $0.element.topics.contains(partition.topic) }
            let underQuota = readers.first { rank, member in target[member.name]!.count < base + (rank < extra ? 1 : 0) }
            guard let member = (underQuota ?? readers.first)?.element else { continue }
            target[member.name]!.insert(partition)
        }
        return target
    }
}
