import Foundation
import IsletKafka
import IsletMessages

/// What a simulated record carries: the typed message (the simulation does not encode JSON; the
/// services' codecs have their own tests).
enum SimValue {
    case event(ActivityEvent)
    case request(PushRequest)
    case outcome(PushOutcome)
    case token(TokenRecord)
    /// content-service's changelog (`islet.content-memory.v1`): an activity's memory, `nil` a tombstone.
    case memory(ContentMemoryRecord.Activity?)
}

struct SimRecord {
    var offset: Int64
    var key: String
    var value: SimValue
    var timestamp: Date
}

/// A topic of the simulated cluster: partitions of records, appended in order, never lost (the
/// cluster is not what is under test: its faults are refused and slow produces, and rebalances).
final class SimTopic {
    let name: String
    private(set) var partitions: [[SimRecord]]

    init(name: String, partitions: Int) {
        self.name = name
        self.partitions = Array(repeating: [], count: partitions)
    }

    var partitionCount: Int32 { Int32(partitions.count) }

    /// The partition of a key, by Islet's rule (the activity id's murmur2, as librdkafka does).
    func partition(ofKey key: String) -> Int32 {
        let bytes = Array(key.utf8)
        return KafkaPartitioner.partition(ofKey: String(decoding: bytes[MessageKey.partitionKeyRange(of: bytes)], as: UTF8.self), partitions: partitionCount)
    }

    @discardableResult
    func append(_ key: String, _ value: SimValue, at time: Date) -> (partition: Int32, offset: Int64) {
        let partition = self.partition(ofKey: key)
        let offset = Int64(partitions[Int(partition)].count)
        partitions[Int(partition)].append(SimRecord(offset: offset, key: key, value: value, timestamp: time))
        return (partition, offset)
    }

    func records(_ partition: Int32) -> [SimRecord] { partitions[Int(partition)] }

    func end(_ partition: Int32) -> Int64 { Int64(partitions[Int(partition)].count) }

    func message(_ partition: Int32, _ offset: Int64) -> KafkaMessage {
        let record = partitions[Int(partition)][Int(offset)]
        return KafkaMessage(
            topic: name, partition: partition, offset: offset, key: Array(record.key.utf8), value: nil,
            timestampMilliseconds: Int64((record.timestamp.timeIntervalSince1970 * 1_000).rounded(.down)))
    }
}

/// A consumer group on the simulated cluster: members, which of them owns each partition,
/// committed offsets, and rebalances — eager (every member gives up every partition, then the
/// group assigns them again) or cooperative (only the partitions that move are given up). A
/// member gives its partitions up through its revocation handler (``SimGroupMember/revoke(_:done:)``),
/// bounded in time; what it marked processed is committed after it. A member whose session
/// expires (killed, or stalled) loses its partitions without either.
final class SimGroup {
    enum RebalanceProtocol { case eager, cooperative }

    /// One membership: a member as it joined (a process that joins again is a new member; a
    /// killed process stays a member until its session expires).
    private struct Membership {
        var id: String
        var member: any SimGroupMember
        /// Whether the member is still the one that joined (not a later process or membership).
        var isCurrent: Bool { member.memberId == id }
    }

    let topic: SimTopic
    let rebalanceProtocol: RebalanceProtocol
    /// How long a revocation handler may take (librdkafka waits for it; the service bounds it).
    let revocationLimit: TimeInterval
    private unowned let world: SimWorld
    private var members: [Membership] = []
    /// The member owning each partition, by its member id.
    private(set) var owners: [Int32: String] = [:]
    private(set) var committed: [Int32: Int64] = [:]
    private(set) var generation = 0
    private var rebalancing = false
    private var rebalanceAgain = false

    init(topic: SimTopic, rebalanceProtocol: RebalanceProtocol, revocationLimit: TimeInterval, world: SimWorld) {
        self.topic = topic
        self.rebalanceProtocol = rebalanceProtocol
        self.revocationLimit = revocationLimit
        self.world = world
    }

    func committedOffset(_ partition: Int32) -> Int64 { committed[partition] ?? 0 }

    private func commit(_ partition: Int32, _ offset: Int64, by memberId: String) {
        // A commit of a member that no longer owns the partition is refused (its generation is old).
        guard owners[partition] == memberId else { return }
        committed[partition] = max(committed[partition] ?? 0, offset)
    }

    func join(_ member: any SimGroupMember) {
        // An earlier membership of the same process that it no longer heartbeats for expires.
        for stale in members where stale.member === member && !stale.isCurrent {
            world.scheduler.after(SimWorld.sessionTimeout) { [self] in expire(memberId: stale.id) }
        }
        members.append(Membership(id: member.memberId, member: member))
        world.trace("group: \(member.memberId) joins")
        rebalance()
    }

    /// A member leaves gracefully: it gives its partitions up (handler, commit), then the others rebalance.
    func leave(_ member: any SimGroupMember, then: @escaping () -> Void) {
        guard let membership = members.first(where: { $0.id == member.memberId }) else { return then() }
        // No longer counted from now: a rebalance under way assigns it nothing.
        members.removeAll { $0.id == membership.id }
        let mine = owners.filter { $0.value == membership.id }.map(\.key).sorted()
        world.trace("group: \(membership.id) leaves, giving up \(mine)")
        revokeFrom(membership, mine) { [self] in
            for (partition, owner) in owners where owner == membership.id { owners[partition] = nil }
            then()
            rebalance()
        }
    }

    /// A member's session expired (killed, or stalled past the session timeout): its partitions
    /// are assigned to the others without its revocation handler and without a commit.
    func expire(memberId: String) {
        guard members.contains(where: { $0.id == memberId }) else { return }
        members.removeAll { $0.id == memberId }
        let lost = owners.filter { $0.value == memberId }.map(\.key).sorted()
        for partition in lost { owners[partition] = nil }
        world.trace("group: \(memberId)'s session expired, losing \(lost)")
        rebalance()
    }

    func isMember(_ memberId: String) -> Bool { members.contains { $0.id == memberId } }

    /// The assignment a range assignor gives the members (sorted by member id).
    private func targetAssignment() -> [Int32: String] {
        let ids = members.map(\.id).sorted()
        guard !ids.isEmpty else { return [:] }
        var target: [Int32: String] = [:]
        let count = Int(topic.partitionCount)
        for partition in 0..<count {
            target[Int32(partition)] = ids[partition * ids.count / count]
        }
        return target
    }

    /// Moves the group to the assignment its members call for. One rebalance at a time; a change
    /// of members during one starts another after it.
    func rebalance() {
        guard !rebalancing else {
            rebalanceAgain = true
            return
        }
        rebalancing = true
        generation += 1
        let target = targetAssignment()
        // What each member gives up: eager, everything it owns; cooperative, what moves.
        var giving: [(Membership, [Int32])] = []
        for membership in members {
            let mine = owners.filter { $0.value == membership.id }.map(\.key).sorted()
            let give = rebalanceProtocol == .eager ? mine : mine.filter { target[$0] != membership.id }
            if !give.isEmpty { giving.append((membership, give)) }
        }
        world.trace("group: rebalance \(generation) (\(rebalanceProtocol)), members \(members.map(\.id))")
        var waiting = giving.count
        let assign = { [self] in
            for (membership, partitions) in giving {
                for partition in partitions where owners[partition] == membership.id { owners[partition] = nil }
            }
            for membership in members {
                // (Members that left meanwhile are not in `members` any more.)
                let new = target.filter { $0.value == membership.id && owners[$0.key] == nil }.map(\.key).sorted()
                for partition in new { owners[partition] = membership.id }
                // Every rebalance ends with an assignment, empty when nothing is added (librdkafka
                // calls the rebalance callback with an empty list under the cooperative protocol
                // too): a member learns that partitions it gave up went elsewhere.
                if membership.isCurrent { membership.member.assigned(new) }
            }
            rebalancing = false
            if rebalanceAgain {
                rebalanceAgain = false
                rebalance()
            }
        }
        // The members join and sync again before the new assignment takes effect.
        let delay = world.random.seconds(0.05, 2)
        guard waiting > 0 else { return world.scheduler.after(delay, assign) }
        for (membership, partitions) in giving {
            revokeFrom(membership, partitions) { [self] in
                waiting -= 1
                if waiting == 0 { world.scheduler.after(delay, assign) }
            }
        }
    }

    /// Runs the member's revocation handler for `partitions` (at most ``revocationLimit``), then
    /// commits what it marked, then tells it they are revoked. A member that is gone (its process
    /// killed) does nothing: the group waits for its session to expire or the limit.
    private func revokeFrom(_ membership: Membership, _ partitions: [Int32], done: @escaping () -> Void) {
        guard !partitions.isEmpty else {
            done()
            return
        }
        var finished = false
        let finish = { [self] in
            guard !finished else { return }
            finished = true
            if membership.isCurrent {
                for partition in partitions {
                    if let mark = membership.member.marked(partition) { commit(partition, mark, by: membership.id) }
                }
                membership.member.revoked(partitions)
            }
            for partition in partitions where owners[partition] == membership.id { owners[partition] = nil }
            done()
        }
        if membership.isCurrent { membership.member.revoke(partitions, done: finish) }
        world.scheduler.after(revocationLimit) { [self] in
            if !finished, membership.isCurrent { membership.member.revocationTimedOut(partitions) }
            finish()
        }
    }

    /// Commits what each member marked (librdkafka's auto-commit of stored offsets).
    func autoCommit() {
        for membership in members where membership.isCurrent {
            for (partition, owner) in owners where owner == membership.id {
                if let mark = membership.member.marked(partition) { commit(partition, mark, by: membership.id) }
            }
        }
    }
}

/// A consumer of a ``SimGroup``, as the group sees it.
protocol SimGroupMember: AnyObject {
    var memberId: String { get }
    /// The revocation handler: `done` once the work on `partitions` is finished (the group does
    /// not wait longer than its limit).
    func revoke(_ partitions: [Int32], done: @escaping () -> Void)
    /// The next offset to commit for `partition`, as marked processed.
    func marked(_ partition: Int32) -> Int64?
    /// After the handler and the commit (or after a loss, when the member notices).
    func revoked(_ partitions: [Int32])
    /// The group stopped waiting for the handler.
    func revocationTimedOut(_ partitions: [Int32])
    func assigned(_ partitions: [Int32])
}
