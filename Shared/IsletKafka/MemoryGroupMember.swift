import ServiceLifecycle
import Synchronization

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
