import Foundation
import IsletTokens

/// Where a simulated service process is in its life. `stalled`: cut off from the cluster (only a
/// dispatcher is, ``SimDispatcher/stall(for:)``).
enum SimPhase: Equatable { case down, running, draining, stalled }

/// What the simulated service processes (``SimContent``, ``SimDispatcher``) do alike: each start
/// is a new incarnation (callbacks of an earlier process are dropped) and each join of its group a
/// new member; it dies with kill -9 and stops with SIGTERM the same way; it follows the tokens
/// topic through a replica that lags; its read loop and its revocation handler's time limit work
/// the same. What differs is each one's own: the hooks below.
protocol SimProcess: SimGroupMember {
    var name: String { get }
    var world: SimWorld { get }
    var phase: SimPhase { get set }
    /// Bumped at every start.
    var incarnation: Int { get }
    /// Joins of the group by this incarnation (its member id).
    var joins: Int { get }
    /// The consumer group it is a member of.
    var group: SimGroup { get }
    var tokens: PartitionTokens { get }
    /// Where the token replica has read each partition it follows to.
    var tokenPositions: [Int32: Int64] { get set }
    var readScheduled: Bool { get set }
    /// Revocations whose handler waits for the work on their partitions.
    var revocations: [(partitions: Set<Int32>, done: () -> Void)] { get set }
    /// Whether its read loop takes a record now.
    var mayRead: Bool { get }

    func start()
    /// Reads the next record (``scheduleRead()`` calls it).
    func readNext()
    /// Calls the `done` of each revocation whose partitions' work has finished.
    func checkRevocations()
    /// kill -9: what goes with the process besides its memory (called before it is down).
    func dying()
    /// The process is down: what it held in memory is gone.
    func forgetMemory()
    /// How long the token replica takes to apply a record appended now (a draw).
    func tokenReplicaLag() -> TimeInterval
    /// The work on revoked `partitions` did not finish within the handler's limit: `done` is the
    /// revocation's, to call now.
    func revocationOverran(_ partitions: [Int32], done: () -> Void)
}

extension SimProcess {
    var memberId: String { "\(name).\(incarnation).\(joins)" }

    var isUp: Bool { phase != .down }

    func dying() {}

    // MARK: Process lifecycle

    /// kill -9: everything in memory is gone; the group notices after the session timeout.
    func kill() {
        guard phase != .down else { return }
        world.trace("\(name): killed (kill -9)")
        dying()
        phase = .down
        forgetMemory()
        world.expireAfterSessionTimeout(memberId, in: group)
    }

    /// SIGTERM arrives: the process drains from now on. The incarnation being stopped; `nil` when
    /// it was not running.
    func beginStopping() -> Int? {
        guard phase == .running else { return nil }
        world.trace("\(name): SIGTERM")
        phase = .draining
        return incarnation
    }

    /// The end of SIGTERM: leaves the group; once it has, the process is down, and it starts again
    /// after `restartAfter` seconds (if any).
    func leaveGroup(incarnation: Int, restartAfter: TimeInterval?) {
        group.leave(self) { [weak self] in
            guard let self, self.incarnation == incarnation else { return }
            self.world.trace("\(self.name): stopped")
            self.phase = .down
            self.forgetMemory()
            if let restartAfter { self.world.scheduler.after(restartAfter) { [weak self] in self?.start() } }
        }
    }

    // MARK: The revocation handler

    /// Waits for the work on `partitions` (``checkRevocations()`` calls `done` once it is finished),
    /// at most `limit` seconds: then ``revocationOverran(_:done:)``.
    func awaitRevocation(of partitions: [Int32], done: @escaping () -> Void, atMost limit: TimeInterval) {
        revocations.append((Set(partitions), done))
        let incarnation = self.incarnation
        world.scheduler.after(limit) { [weak self] in
            guard let self, self.incarnation == incarnation else { return }
            if let index = self.revocations.firstIndex(where: { $0.partitions == Set(partitions) }) {
                self.revocationOverran(partitions, done: self.revocations.remove(at: index).done)
            }
        }
        checkRevocations()
    }

    // MARK: The token replica

    /// A record was appended to the tokens topic: applied after the replica's lag.
    func tokenAppended(partition: Int32, offset: Int64) {
        guard isUp, tokenPositions[partition] != nil else { return }
        let incarnation = self.incarnation
        world.scheduler.after(tokenReplicaLag()) { [weak self] in
            guard let self, self.incarnation == incarnation, self.isUp else { return }
            self.catchUpTokens(partition, to: offset + 1)
        }
    }

    /// The replica applies the records of `partition` up to `end` (exclusive).
    func catchUpTokens(_ partition: Int32, to end: Int64) {
        guard var position = tokenPositions[partition] else { return }
        let records = world.tokens.records(partition)
        while position < end {
            let record = records[Int(position)]
            if case .token(let token) = record.value {
                tokens.apply(token, key: record.key, partition: partition, offset: record.offset)
            }
            position += 1
        }
        tokenPositions[partition] = position
    }

    // MARK: The read loop

    /// The next record is read a moment from now (one read at a time).
    func scheduleRead() {
        guard mayRead, !readScheduled else { return }
        readScheduled = true
        let incarnation = self.incarnation
        world.scheduler.after(world.random.seconds(0.0005, 0.01)) { [weak self] in
            guard let self, self.incarnation == incarnation else { return }
            self.readScheduled = false
            self.readNext()
        }
    }
}
