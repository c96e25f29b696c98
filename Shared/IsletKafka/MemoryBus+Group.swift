import Synchronization

extension MemoryBus {
    /// Runs `change` after the group's earlier changes.
    @discardableResult
    func change(_ group: String, _ change: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        state.withLock { state in
            if state.groups[group] == nil { state.groups[group] = MemoryGroupState() }
            let previous = state.groups[group]!.changes
            let task = Task {
                await previous?.value
                await change()
            }
            state.groups[group]!.changes = task
            return task
        }
    }

    /// The member joins once the group's earlier changes are done (never in the middle of a
    /// rebalance), and the group rebalances.
    func join(_ member: MemoryGroupState.Member, group: String, rebalance: RebalanceProtocol, if current: @escaping @Sendable () -> Bool) {
        change(group) {
            guard current() else { return }
            self.state.withLock { state in
                state.groups[group, default: MemoryGroupState()].members.append(member)
                state.groups[group]!.rebalanceProtocol = rebalance
            }
            await self.rebalance(group)
        }
    }

    /// Moves the group's partitions to where ``MemoryGroupState/target(partitions:)`` says: the
    /// revocations first (every partition under the eager protocol), each through its member's
    /// handler, what it marked committed after it; then the assignments.
    func rebalance(_ group: String) async {
        let revocations = state.withLock { state -> [(name: String, partitions: [KafkaTopicPartition])] in
            guard let groupState = state.groups[group] else { return [] }
            let topics = Set(groupState.members.flatMap(\.topics))
            var all: [KafkaTopicPartition] = []
            for topic in topics.sorted() {
                for partition in state.partitions(of: topic).indices { all.append(KafkaTopicPartition(topic: topic, partition: Int32(partition))) }
            }
            let target = groupState.target(partitions: all)
            return groupState.members.filter { !$0.crashed }.compactMap { member in
                let going = member.assigned.keys.filter { partition in
                    groupState.rebalanceProtocol == .eager || !(target[member.name]?.contains(partition) ?? false)
                }
                return going.isEmpty ? nil : (member.name, going.sorted(by: Self.order))
            }
        }
        await withDiscardingTaskGroup { tasks in
            for (name, partitions) in revocations {
                tasks.addTask { await self.revoke(partitions, from: name, group: group) }
            }
        }
        state.withLock { state in
            guard var groupState = state.groups[group] else { return }
            var all: [KafkaTopicPartition] = []
            for topic in Set(groupState.members.flatMap(\.topics)).sorted() {
                for partition in state.partitions(of: topic).indices { all.append(KafkaTopicPartition(topic: topic, partition: Int32(partition))) }
            }
            let target = groupState.target(partitions: all)
            for index in groupState.members.indices where !groupState.members[index].crashed {
                let member = groupState.members[index]
                // Never two owners: a partition another member still holds stays its.
                let heldByOthers = Set(groupState.members.filter { $0.name != member.name }.flatMap(\.assigned.keys))
                let new = (target[member.name] ?? []).filter { member.assigned[$0] == nil && !heldByOthers.contains($0) }.sorted(by: Self.order)
                for partition in new {
                    groupState.members[index].assigned[partition] = groupState.nextEpoch
                    groupState.nextEpoch += 1
                    groupState.members[index].positions[partition] = groupState.committed[partition] ?? 0
                }
                // Every rebalance ends with an assignment for every member, empty when nothing
                // came to it (librdkafka's rebalance callback, under either protocol): a member
                // forgets there what went elsewhere.
                member.continuation.yield(.partitionsAssigned(new))
            }
            state.groups[group] = groupState
            for partition in all { Self.deliver(partition, in: &state) }
        }
    }

    /// Takes `partitions` from member `name`: nothing more of theirs is delivered, its handler
    /// runs (at most its timeout), what it marked is committed, and it is told.
    func revoke(_ partitions: [KafkaTopicPartition], from name: String, group: String) async {
        let revocation = state.withLock { state -> MemoryGroupMember.Revocation?? in
            guard let index = state.groups[group]?.index(of: name) else { return nil }
            state.groups[group]!.members[index].revoking.formUnion(partitions)
            return .some(state.groups[group]!.members[index].revocation)
        }
        guard let revocation else { return }
        if let revocation { await waitAtMost(revocation.timeout) { await revocation.handler(partitions) } }
        state.withLock { state in
            guard let index = state.groups[group]?.index(of: name) else { return }
            var member = state.groups[group]!.members[index]
            // Killed while its handler ran: it holds them, uncommitted, until its session expires.
            guard !member.crashed else { return }
            for partition in partitions {
                if let mark = member.marks[partition] { state.groups[group]!.committed[partition] = mark }
                member.assigned[partition] = nil
                member.positions[partition] = nil
                member.marks[partition] = nil
                member.revoking.remove(partition)
            }
            state.groups[group]!.members[index] = member
            member.continuation.yield(.partitionsRevoked(partitions))
        }
    }

    /// Member `name` leaves gracefully: its partitions revoked through its handler, then it is gone.
    func leave(_ name: String, group: String) async {
        let held = state.withLock { state in
            state.groups[group]?.index(of: name).map { state.groups[group]!.members[$0].assigned.keys.sorted(by: Self.order) } ?? []
        }
        if !held.isEmpty { await revoke(held, from: name, group: group) }
        state.withLock { state in
            // Killed meanwhile: it stays, with its partitions, until its session expires.
            guard let index = state.groups[group]?.index(of: name), !state.groups[group]!.members[index].crashed else { return }
            state.groups[group]!.members.remove(at: index)
        }
    }

    /// The session of member `name` expired: its partitions go to others without its handler and
    /// without a commit. A member still running is told they are lost.
    func expire(_ name: String, group: String) -> (lost: [KafkaTopicPartition], member: MemoryGroupState.Member)? {
        state.withLock { state in
            guard let index = state.groups[group]?.index(of: name) else { return nil }
            let member = state.groups[group]!.members.remove(at: index)
            return (member.assigned.keys.sorted(by: Self.order), member)
        }
    }
}
