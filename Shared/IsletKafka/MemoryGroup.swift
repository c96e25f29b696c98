import ServiceLifecycle
import Synchronization

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
        var everAssigned = false
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
                if !new.isEmpty || !member.everAssigned {
                    groupState.members[index].everAssigned = true
                    member.continuation.yield(.partitionsAssigned(new))
                }
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

/// A member of a ``MemoryBus`` consumer group, as a service sees a ``KafkaConsumer``: assignments,
/// records and revocations in ``events``, a revocation handler the group waits for, a loss
/// handler, marks committed at revocation and close.
public final class MemoryGroupMember: GroupMessageSource {
    struct Revocation: Sendable {
        var timeout: Duration
        var handler: @Sendable ([KafkaTopicPartition]) async -> Void
    }

    private struct State {
        var revocation: Revocation?
        var loss: (@Sendable ([KafkaTopicPartition]) -> Void)?
        /// The current membership, while it is in the group.
        var membership: String?
        /// A graceful leave is under way (the membership stays until it is done).
        var leaving = false
        var joins = 0
        var started = false
        /// `nil` once stopped.
        var waiters: [CheckedContinuation<Void, Never>]? = []
    }

    private let stream: AsyncStream<KafkaConsumerEvent>
    private let continuation: AsyncStream<KafkaConsumerEvent>.Continuation
    private let bus: MemoryBus
    private let group: String
    private let topics: [String]
    private let autoCommit: Bool
    private let rebalance: MemoryBus.RebalanceProtocol
    private let state = Mutex(State())
    /// The member's name in the group, for ``MemoryBus/assignment(group:)`` (its membership adds a join count).
    public let name: String

    init(bus: MemoryBus, group: String, topics: [String], rebalance: MemoryBus.RebalanceProtocol, autoCommit: Bool) {
        let (stream, continuation) = AsyncStream.makeStream(of: KafkaConsumerEvent.self)
        self.bus = bus
        self.group = group
        self.topics = topics
        self.autoCommit = autoCommit
        self.rebalance = rebalance
        self.stream = stream
        self.continuation = continuation
        name = "member-\(bus.state.withLock { $0.takeId() })"
    }

    /// Assignments, records and revocations, in order. Iterate it once.
    public var events: MemoryMemberEvents { MemoryMemberEvents(stream: stream, member: self) }

    /// Always ready: memory does not go away.
    public var health: KafkaClientHealth { .ready }

    public func onRevocation(timeout: Duration, _ handler: @escaping @Sendable ([KafkaTopicPartition]) async -> Void) {
        state.withLock { $0.revocation = Revocation(timeout: timeout, handler: handler) }
    }

    public func onLoss(_ handler: @escaping @Sendable ([KafkaTopicPartition]) -> Void) {
        state.withLock { $0.loss = handler }
    }

    public func isCurrent(_ message: KafkaMessage) -> Bool {
        guard let membership = state.withLock({ $0.membership }) else { return false }
        return bus.state.withLock { state in
            state.groups[group]?.index(of: membership).map { state.groups[group]!.members[$0].isCurrent(message) } ?? false
        }
    }

    @discardableResult
    public func markProcessed(_ message: KafkaMessage) -> Bool {
        guard let membership = state.withLock({ $0.membership }) else { return false }
        return bus.state.withLock { $0.groups[group]?.mark(message, by: membership) ?? false }
    }

    /// Commits what was marked (``MemoryBus/member(group:topics:rebalance:autoCommit:)`` without auto-commit).
    public func commit() {
        guard let membership = state.withLock({ $0.membership }) else { return }
        bus.state.withLock { state in
            guard let index = state.groups[group]?.index(of: membership) else { return }
            for (partition, mark) in state.groups[group]!.members[index].marks { state.groups[group]!.committed[partition] = mark }
        }
    }

    public func run() async throws { try await run(stoppingOnGracefulShutdown: true) }

    /// Joins the group and returns once the member has left it (``shutdown()``) or crashed (``crash()``).
    public func run(stoppingOnGracefulShutdown: Bool) async throws {
        let first = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && state.waiters != nil
        }
        guard first else { return }
        join()
        await withTaskCancellationHandler {
            if stoppingOnGracefulShutdown {
                await withGracefulShutdownHandler { await self.stopped() } onGracefulShutdown: { self.shutdown() }
            } else {
                await stopped()
            }
        } onCancel: {
            self.shutdown()
        }
    }

    private func stopped() async {
        await withCheckedContinuation { waiter in
            let running = state.withLock { state -> Bool in
                guard state.waiters != nil else { return false }
                state.waiters!.append(waiter)
                return true
            }
            if !running { waiter.resume() }
        }
    }

    private func join() {
        let member = state.withLock { state -> MemoryGroupState.Member? in
            // Stopped, or leaving for good: it does not join again.
            guard state.waiters != nil, !state.leaving else { return nil }
            state.joins += 1
            let membership = "\(name).\(state.joins)"
            state.membership = membership
            return MemoryGroupState.Member(
                name: membership, handle: ObjectIdentifier(self), continuation: continuation, topics: topics, autoCommit: autoCommit,
                revocation: state.revocation, loss: state.loss)
        }
        guard let member else { return }
        // Killed, stopped or gone again before the group took the join in: it does not join.
        bus.join(member, group: group, rebalance: rebalance) { [self] in state.withLock { $0.membership == member.name } }
    }

    private func finish() {
        continuation.finish()
        let waiters = state.withLock { state in
            defer { state.waiters = nil }
            return state.waiters ?? []
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Leaves the group gracefully (its partitions through the revocation handler, what it marked
    /// meanwhile committed), then ``run()`` returns.
    public func shutdown() {
        let leaving = state.withLock { state -> String? in
            guard let membership = state.membership, !state.leaving else { return nil }
            state.leaving = true
            return membership
        }
        guard let membership = leaving else {
            if state.withLock({ $0.membership == nil }) { finish() }
            return
        }
        let (bus, group) = (self.bus, self.group)
        bus.change(group) {
            await bus.leave(membership, group: group)
            self.state.withLock { $0.membership = nil }
            self.finish()
            await bus.rebalance(group)
        }
    }

    /// Waits until the member has left the group after ``shutdown()`` (and the group rebalanced).
    public func left() async {
        await stopped()
        await bus.state.withLock { $0.groups[group]?.changes }?.value
    }

    /// Leaves the group gracefully and joins it again at once as a new member, keeping its events
    /// (as a ``KafkaConsumer`` does when it lengthens its fetch wait); joins a member left out by
    /// ``expireSession(rejoining:)``. Returns once it is back in.
    public func rejoin() async {
        guard state.withLock({ $0.waiters != nil && $0.started }) else { return }
        if let membership = state.withLock({ $0.membership }) {
            let (bus, group) = (self.bus, self.group)
            await bus.change(group) {
                await bus.leave(membership, group: group)
                await bus.rebalance(group)
            }.value
        }
        join()
        await bus.state.withLock { $0.groups[group]?.changes }?.value
    }

    /// kill -9: nothing committed, no handler; the group keeps the member, with its partitions,
    /// until ``expireSession()``. ``run()`` returns.
    public func crash() {
        if let membership = state.withLock({ state in defer { state.membership = nil }; return state.membership }) {
            bus.state.withLock { state in
                guard let index = state.groups[group]?.index(of: membership) else { return }
                state.groups[group]!.members[index].crashed = true
            }
            crashedMembership.withLock { $0 = membership }
        }
        finish()
    }

    private let crashedMembership = Mutex<String?>(nil)

    /// The member's session expires: its partitions go to the others without its handler, nothing
    /// committed. A crashed member is gone; one still running is told they are lost (its loss
    /// handler, then ``KafkaConsumerEvent/partitionsRevoked(_:)``) and joins again as a new member
    /// (with `rejoining` false: once it reaches the cluster again, ``rejoin()``). Returns once the
    /// group has rebalanced.
    public func expireSession(rejoining: Bool = true) async {
        let running = state.withLock { state in defer { state.membership = nil }; return state.membership }
        guard let membership = running ?? crashedMembership.withLock({ $0 }) else { return }
        let (bus, group) = (self.bus, self.group)
        let expired = await withCheckedContinuation { (result: CheckedContinuation<(lost: [KafkaTopicPartition], member: MemoryGroupState.Member)?, Never>) in
            bus.change(group) { result.resume(returning: bus.expire(membership, group: group)) }
        }
        if running != nil, let expired {
            expired.member.loss?(expired.lost)
            if !expired.lost.isEmpty { continuation.yield(.partitionsRevoked(expired.lost)) }
            if rejoining {
                join()
            } else {
                bus.change(group) { await bus.rebalance(group) }
            }
        } else {
            bus.change(group) { await bus.rebalance(group) }
        }
        await bus.state.withLock { $0.groups[group]?.changes }?.value
    }
}

/// A ``MemoryGroupMember``'s events: a record of a partition no longer the member's under the
/// assignment it was handed over in (revoked, or being revoked) is not delivered, as
/// ``KafkaConsumer`` drops the buffered records of revoked partitions.
public struct MemoryMemberEvents: AsyncSequence, Sendable {
    public typealias Element = KafkaConsumerEvent
    public typealias Failure = Never
    let stream: AsyncStream<KafkaConsumerEvent>
    let member: MemoryGroupMember

    public func makeAsyncIterator() -> Iterator { Iterator(base: stream.makeAsyncIterator(), member: member) }

    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncStream<KafkaConsumerEvent>.Iterator
        let member: MemoryGroupMember

        public mutating func next() async -> KafkaConsumerEvent? { await next(isolation: nil) }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> KafkaConsumerEvent? {
            while let event = await base.next(isolation: actor) {
                if case .message(let message) = event, !member.isCurrent(message) { continue }
                return event
            }
            return nil
        }
    }
}
