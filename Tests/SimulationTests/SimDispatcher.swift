import Foundation
import IsletKafka
import IsletMessages
import IsletTokens
import Logging
@testable import APNsDispatcher

/// One apns-dispatcher process in the simulation: the real ``DispatchMachine`` (every decision),
/// the real ``TicketBook`` and offset tracking, the real ``RequestPartitions`` and recent-outcome
/// reading rule, and the real ``PartitionTokens`` table — driven the way ``DispatcherService`` and
/// ``DispatchEngine`` drive them, with the simulation's clock, cluster and APNs in place of the
/// real ones. Each input runs to its end before the next (no threads): a seed replays exactly.
///
/// What the driver does, step for step as the services do it:
/// - a record read: the partition's recent outcomes first if it was just assigned; a ticket
///   (none while its partition is being revoked); `submit` (held back while the machine has no room);
/// - `.send`: a push-to-start's announcement persisted first (retried until Kafka takes it), then
///   the push to APNs, its answer back to the machine;
/// - `.publish`: the outcome persisted (again after a failure), then its ticket and its copies'
///   tickets done, then `outcomePersisted`;
/// - the revocation handler: nothing new taken for the partitions, their waiting requests dropped
///   again and again until nothing of theirs is open (or the group's limit passes);
/// - SIGTERM: a drain (nothing new sent) until nothing is in flight (at most 8 s), then leave.
final class SimDispatcher: SimProcess, @unchecked Sendable {
    let name: String
    unowned let world: SimWorld
    var phase = SimPhase.down
    /// Bumped at every start: callbacks of an earlier process are dropped.
    private(set) var incarnation = 0
    private(set) var joins = 0

    private var machine: DispatchMachine!
    private(set) var tokens = PartitionTokens()
    private var tickets: TicketBook!
    private var requestPartitions = RequestPartitions()
    /// Partitions owned, with the next offset to read and the next offset marked processed.
    private var positions: [Int32: Int64] = [:]
    private var marks: [Int32: Int64] = [:]
    /// Where the token replica has read each owned partition to.
    var tokenPositions: [Int32: Int64] = [:]
    /// The read loop waits: for recent outcomes, for room in the machine, for a token restore.
    private var intakeBusy = false
    var readScheduled = false
    private var timerAt: Date?
    var revocations: [(partitions: Set<Int32>, done: () -> Void)] = []
    /// A drain's end (SIGTERM): called once nothing is in flight, or at the drain's limit.
    private var drained: (() -> Void)?
    let policy: DispatcherPolicy
    /// How long the replica lags behind the tokens topic, at most (a draw per record).
    var replicaLag: ClosedRange<Double> = 0.001...0.2

    init(name: String, world: SimWorld, policy: DispatcherPolicy) {
        self.name = name
        self.world = world
        self.policy = policy
    }

    var group: SimGroup { world.dispatchers }
    var mayRead: Bool { (phase == .running || phase == .draining) && !intakeBusy }

    /// The machine, for the invariants (memory held).
    var heldRequests: Int { machine?.queued ?? 0 }
    var heldFinished: Int { machine?.finishedCount ?? 0 }
    var heldAwaiting: Int { machine?.awaitingRequests ?? 0 }

    // MARK: Process lifecycle

    func start() {
        precondition(phase == .down)
        incarnation += 1
        joins = 0
        phase = .running
        tokens = PartitionTokens()
        let random = world.random
        var logger = Logger(label: "sim.\(name)")
        logger.logLevel = .critical
        machine = DispatchMachine(
            tokens: tokens, policy: policy, teams: [SimWorld.bundleId: SimWorld.team], random: { random.unit() }, logger: logger, now: world.now)
        let incarnation = self.incarnation
        tickets = TicketBook { [weak self] message in
            guard let self, self.incarnation == incarnation else { return }
            self.mark(message)
        }
        // The token table wakes requests that wait for their token, as the engine's observer does.
        tokens.onApply { [weak self] key in
            guard let self, self.incarnation == incarnation, self.phase != .down else { return }
            self.step { $0.tokenArrived(key, now: $1) }
        }
        requestPartitions = RequestPartitions()
        rejoining = false
        revocationsWhileCutOff = []
        positions = [:]
        marks = [:]
        tokenPositions = [:]
        intakeBusy = false
        readScheduled = false
        timerAt = nil
        revocations = []
        drained = nil
        world.trace("\(name): starts (process \(incarnation))")
        joins += 1
        world.dispatchers.join(self)
    }

    /// kill -9: what it was sending may have reached the phone, and no outcome says so.
    func dying() {
        world.killed(self)
        markUnrecorded(partitions: nil)
    }

    func forgetMemory() {
        machine = nil
    }

    /// SIGTERM: drain (nothing new sent; what is in flight finishes, at most 8 s), then commit and leave.
    func terminate(restartAfter: TimeInterval?) {
        guard let incarnation = beginStopping() else { return }
        step { machine, _ in
            machine.beginDrain()
            return []
        }
        var left = false
        let leave = { [weak self] in
            guard let self, !left, self.incarnation == incarnation, self.phase == .draining else { return }
            left = true
            // Past the drain timeout what is still in flight is cut off.
            self.markUnrecorded(partitions: nil)
            self.drained = nil
            self.leaveGroup(incarnation: incarnation, restartAfter: restartAfter)
        }
        drained = leave
        world.scheduler.after(policy.drainTimeoutSeconds, leave)
        checkDrained()
    }

    /// The member is cut off from the cluster (a network partition, a broker it cannot reach):
    /// it reads nothing, writes nothing, cannot take part in a rebalance. Past the session timeout
    /// the group gives its partitions to others, and librdkafka tells the member they are lost at
    /// that moment (its own session timer); what it had in flight to APNs still comes back. When
    /// the cut heals it joins again as a new member.
    func stall(for seconds: TimeInterval) {
        guard phase == .running else { return }
        world.trace("\(name): cut off from the cluster for \(String(format: "%.1f", seconds)) s")
        phase = .stalled
        let incarnation = self.incarnation
        let (group, memberId) = (world.dispatchers!, memberId)
        if seconds > SimWorld.sessionTimeout {
            world.scheduler.after(SimWorld.sessionTimeout) { [weak self] in
                guard let self, self.incarnation == incarnation, self.phase == .stalled, self.memberId == memberId else { return }
                self.loseSession()
                group.expire(memberId: memberId)
            }
        }
        world.scheduler.after(seconds) { [weak self] in
            guard let self, self.incarnation == incarnation, self.phase == .stalled else { return }
            self.phase = .running
            if group.isMember(memberId) {
                self.world.trace("\(self.name): reaches the cluster again, still a member")
                let pending = self.revocationsWhileCutOff
                self.revocationsWhileCutOff = []
                for (partitions, done) in pending { self.revoke(partitions, done: done) }
                self.scheduleRead()
            } else if self.rejoining {
                // Its handle is being replaced (``rejoin()``): the new one joins once the old one's
                // leaving is done — one member per process, as one consumer handle at a time.
                self.world.trace("\(self.name): reaches the cluster again; its new handle joins once the old one has left")
            } else {
                self.world.trace("\(self.name): reaches the cluster again; joins as a new member")
                self.joins += 1
                group.join(self)
            }
        }
    }

    /// What is in flight to APNs, or answered and its outcome not yet written, of `partitions`
    /// (`nil`: all): the next owner may send it again (the documented allowance; SimWorld).
    private func markUnrecorded(partitions: Set<Int32>?) {
        guard let machine else { return }
        for slot in machine.slots.values {
            if let entry = slot.inFlight, partitions.map({ entry.partition.map($0.contains) ?? true }) ?? true {
                world.inFlightAtLoss(entry.request.requestId)
                // An announced start in flight: the next owner fails it (its answer is unknown to it).
                if DispatchEngine.isPushToStart(entry.request) { world.startAtRisk(entry.request.requestId) }
            }
        }
        for requestId in machine.persisting.keys { world.inFlightAtLoss(requestId) }
    }

    /// The session expired: every partition is lost (no handler, nothing committed). The requests
    /// of theirs in flight to APNs may be sent again by the next owner before their outcome is on
    /// the topic.
    private func loseSession() {
        let lost = positions.keys.sorted()
        world.trace("\(name): its session expired: partitions \(lost) lost")
        // The rebalances it missed were of the membership that expired.
        revocationsWhileCutOff = []
        // What it could not write before the loss (a start's `retrying`) the next owner cannot know.
        world.killed(self)
        markUnrecorded(partitions: Set(lost))
        revoked(lost)
    }

    /// Leaves the group gracefully and joins again at once as a new member, keeping what it
    /// remembers (as the consumer does when it lengthens its fetch wait).
    func rejoin() {
        guard phase == .running, !rejoining else { return }
        world.trace("\(name): leaves and joins the group again (a new handle)")
        rejoining = true
        let incarnation = self.incarnation
        world.dispatchers.leave(self) { [weak self] in
            guard let self, self.incarnation == incarnation else { return }
            self.rejoining = false
            guard self.phase == .running else { return }
            self.joins += 1
            self.world.dispatchers.join(self)
        }
    }

    private var rejoining = false
    private var revocationsWhileCutOff: [([Int32], () -> Void)] = []

    // MARK: The group's calls

    func revoke(_ partitions: [Int32], done: @escaping () -> Void) {
        // A member cut off from the cluster learns of the rebalance when it reaches the cluster again.
        guard phase != .stalled else {
            revocationsWhileCutOff.append((partitions, done))
            return
        }
        guard isUp else { return done() }
        world.trace("\(name): revoking \(partitions)")
        let topicPartitions = partitions.map { KafkaTopicPartition(topic: SimWorld.requestsTopic, partition: $0) }
        tickets.beginRevoking(topicPartitions)
        // DispatcherService's handler: nothing of theirs is sent or retried from now on.
        step { machine, _ in
            machine.disown(partitions)
            return machine.takeActions()
        }
        // The handler gives up waiting after the drain timeout (8 s): the next owner may send again
        // what was in flight.
        awaitRevocation(of: partitions, done: done, atMost: policy.drainTimeoutSeconds)
    }

    func revocationOverran(_ partitions: [Int32], done: () -> Void) {
        world.trace("\(name): its revoked partitions' work did not finish within the drain timeout")
        markUnrecorded(partitions: Set(partitions))
        done()
        scheduleRead()
    }

    func marked(_ partition: Int32) -> Int64? { isUp ? marks[partition] : nil }

    func revocationTimedOut(_ partitions: [Int32]) {
        world.trace("\(name): the group stopped waiting for its revocation of \(partitions)")
        markUnrecorded(partitions: Set(partitions))
    }

    func revoked(_ partitions: [Int32]) {
        guard isUp else { return }
        let revoked = Set(partitions.map { KafkaTopicPartition(topic: SimWorld.requestsTopic, partition: $0) })
        revocations.removeAll { !$0.partitions.isDisjoint(with: partitions) }
        var dropped: [UInt64] = []
        step { machine, _ in
            machine.disown(partitions)
            dropped = machine.dropWaiting { ticket in self.tickets.partition(of: ticket).map(revoked.contains) ?? false }
            return []
        }
        tickets.forget(dropped)
        tickets.revoke(Array(revoked))
        tokens.drop(partitions: partitions)
        requestPartitions.revoked(partitions)
        for partition in partitions {
            positions[partition] = nil
            epochs[partition] = nil
            marks[partition] = nil
            tokenPositions[partition] = nil
        }
        world.trace("\(name): revoked \(partitions)")
    }

    func assigned(_ partitions: [Int32]) {
        guard isUp else { return }
        world.trace("\(name): assigned \(partitions)")
        tokens.own(partitions: partitions)
        for partition in partitions {
            lastEpoch += 1
            epochs[partition] = lastEpoch
            positions[partition] = world.dispatchers.committedOffset(partition)
            tokenPositions[partition] = 0
            // The tokens first, to the topic's end (PartitionTokenLoader): no request is looked at
            // against a half-read partition.
            catchUpTokens(partition, to: world.tokens.end(partition))
        }
        machine.own(partitions)
        requestPartitions.assigned(partitions)
        scheduleRead()
    }

    // MARK: The token replica

    func tokenReplicaLag() -> TimeInterval {
        world.random.chance(0.05) ? world.random.seconds(2, 20) : world.random.seconds(replicaLag.lowerBound, replicaLag.upperBound)
    }

    // MARK: Reading requests

    /// A record was appended to a requests partition.
    func requestAppended(partition: Int32) {
        if positions[partition] != nil { scheduleRead() }
    }

    /// The consumer's next record, from a partition chosen by chance among those with records left.
    func readNext() {
        guard phase == .running || phase == .draining, !intakeBusy, revocations.isEmpty else { return }
        let ready = positions.filter { $0.value < world.requests.end($0.key) }.map(\.key).sorted()
        guard !ready.isEmpty else { return }
        let partition = world.random.pick(ready)
        let offset = positions[partition]!
        positions[partition] = offset + 1
        handle(world.requests.message(partition, offset), epoch: epochs[partition] ?? 0)
    }

    private func handle(_ message: KafkaMessage, epoch: Int) {
        let partition = message.partition
        if requestPartitions.takeCheck(partition) {
            intakeBusy = true
            readRecentOutcomes(partition: partition, epoch: epoch, firstRequestAt: message.timestampMilliseconds) { [weak self] ids in
                guard let self else { return }
                self.intakeBusy = false
                guard let ids, self.isCurrent(partition, epoch: epoch) else {
                    self.world.trace("\(self.name): partition \(partition) no longer its own before its outcomes were read")
                    self.scheduleRead()
                    return
                }
                self.machine.alreadyFinished(ids.finished, maybeDelivered: ids.announcements, floors: ids.floors, partition: partition)
                self.world.trace("\(self.name): outcomes of partition \(partition) read: \(ids.finished.count) finished, \(ids.maybeDelivered.count) may have reached the phone")
                self.submit(message, epoch: epoch)
            }
            return
        }
        submit(message, epoch: epoch)
    }

    private func submit(_ message: KafkaMessage, epoch: Int) {
        guard let ticket = tickets.open(message) else {
            scheduleRead()
            return
        }
        guard case .request(let request) = world.requests.records(message.partition)[Int(message.offset)].value else { fatalError() }
        guard machine.isAccepting, machine.owns(message.partition), isCurrent(message.partition, epoch: epoch) else {
            tickets.abandon([ticket])
            scheduleRead()
            return
        }
        guard machine.hasRoom else {
            // `submit` waits for room; the read loop with it.
            intakeBusy = true
            waitingForRoom = (request, ticket, message.partition, epoch)
            return
        }
        world.trace("\(name): reads \(request.requestId.prefix(8)) (\(request.event.rawValue) #\(request.contentSequence) of \(request.key ?? "")) at \(message.partition)@\(message.offset), ticket \(ticket)")
        step { $0.submit(request, ticket: ticket, partition: message.partition, now: $1) }
        scheduleRead()
    }

    private var waitingForRoom: (PushRequest, UInt64, Int32, Int)?
    /// Each owned partition's assignment (a record read under an earlier one is not taken).
    private var epochs: [Int32: Int] = [:]
    private var lastEpoch = 0

    /// Whether `partition` is still this member's and not being revoked (``KafkaConsumer/isCurrent(_:)``).
    private func isCurrent(_ partition: Int32, epoch: Int? = nil) -> Bool {
        epoch.map { epochs[partition] == $0 } ?? true && positions[partition] != nil && !revocations.contains { $0.partitions.contains(partition) }
    }

    /// Reads the partition's outcomes since the first request read again (as ``RecentOutcomes``):
    /// a read cut short is done again, as long as the partition is this member's (`nil` once not).
    /// The pauses between reads cut short are the service's (``RecentOutcomes/Rereads``).
    private func readRecentOutcomes(
        partition: Int32, epoch: Int, firstRequestAt: Int64?, rereads: RecentOutcomes.Rereads = .init(), _ done: @escaping (RecentOutcomes.Ids?) -> Void
    ) {
        let incarnation = self.incarnation
        var latency = world.random.seconds(0.01, 0.3)
        let fails = world.random.chance(world.faults.outcomeReadFailure)
        // A topic that does not answer: the service's read is cut short after 30 s.
        if world.outcomesUnreadable { latency = 30 }
        world.scheduler.after(latency) { [weak self] in
            guard let self, self.incarnation == incarnation, self.isUp else { return }
            if !fails, !self.world.outcomesUnreadable {
                let since = RecentOutcomes.since(window: .seconds(3_600), firstRequestAt: firstRequestAt, now: self.world.now)
                var ids = RecentOutcomes.Ids()
                for record in self.world.outcomes.records(partition) where record.timestamp >= since {
                    if case .outcome(let outcome) = record.value { ids.add(outcome) }
                }
                return done(ids)
            }
            var rereads = rereads
            guard let pause = rereads.cutShort(stillWanted: self.isCurrent(partition, epoch: epoch)) else { return done(nil) }
            self.world.trace("\(self.name): outcomes of partition \(partition) not read (\(rereads.tries) tries); again in \(pause)")
            self.world.scheduler.after(pause / .seconds(1)) { [weak self] in
                guard let self, self.incarnation == incarnation, self.isUp else { return }
                guard self.isCurrent(partition, epoch: epoch) else { return done(nil) }
                self.readRecentOutcomes(partition: partition, epoch: epoch, firstRequestAt: firstRequestAt, rereads: rereads, done)
            }
        }
    }

    private func mark(_ message: KafkaMessage) {
        // The consumer refuses a mark for a partition it no longer owns.
        guard positions[message.partition] != nil else { return }
        marks[message.partition] = max(marks[message.partition] ?? 0, message.offset + 1)
    }

    // MARK: Driving the machine

    /// One input to the machine, and what it asks carried out (``DispatchEngine``'s `step`).
    /// Memory held, for the checks at the end of a run (nothing may be left once everything is done).
    var leftovers: [String] {
        guard let machine else { return [] }
        var left: [String] = []
        if machine.queued != 0 { left.append("\(machine.queued) requests queued") }
        if machine.noting != 0 || !machine.parked.isEmpty { left.append("\(machine.parked.count) parked") }
        if !machine.copies.isEmpty { left.append("\(machine.copies.count) copies") }
        if !machine.persisting.isEmpty { left.append("\(machine.persisting.count) outcomes persisting") }
        let announcements = machine.maybeDelivered.values.reduce(0) { $0 + $1.count }
        if announcements != 0 { left.append("\(announcements) announcements remembered") }
        if tickets.ticketCount != 0 { left.append("\(tickets.ticketCount) tickets open") }
        if machine.floors.count > policy.rememberedFloors { left.append("\(machine.floors.count) floors") }
        if machine.finishedByActivity.count > policy.rememberedFloors { left.append("\(machine.finishedByActivity.count) activities' finished requests") }
        return left
    }

    private func step(_ input: (inout DispatchMachine, Date) -> [DispatchMachine.Action]) {
        guard machine != nil else { return }
        let actions = input(&machine, world.now)
        for action in actions { carryOut(action) }
        world.checkHeld(self, machine: machine)
        armTimer()
        afterStep()
    }

    private func afterStep() {
        if let (request, ticket, partition, epoch) = waitingForRoom, machine.hasRoom || !machine.isAccepting {
            waitingForRoom = nil
            intakeBusy = false
            if machine.isAccepting, machine.owns(partition), isCurrent(partition, epoch: epoch) {
                world.trace("\(name): reads \(request.requestId.prefix(8)) (room again), ticket \(ticket)")
                step { $0.submit(request, ticket: ticket, partition: partition, now: $1) }
            } else {
                tickets.abandon([ticket])
            }
            scheduleRead()
        }
        checkRevocations()
        checkDrained()
    }

    func checkRevocations() {
        guard !revocations.isEmpty, machine != nil else { return }
        var index = 0
        while index < revocations.count {
            let partitions = Set(revocations[index].partitions.map { KafkaTopicPartition(topic: SimWorld.requestsTopic, partition: $0) })
            // Again on every look: an attempt that failed goes back to waiting for its retry.
            let dropped = machine.dropWaiting { ticket in self.tickets.partition(of: ticket).map(partitions.contains) ?? false }
            tickets.abandon(dropped)
            if !tickets.isOpen(in: partitions) {
                let done = revocations.remove(at: index).done
                world.trace("\(name): its revoked partitions' work finished")
                done()
                // The read loop goes on with the partitions it keeps.
                scheduleRead()
            } else {
                index += 1
            }
        }
    }

    private func checkDrained() {
        guard let drained, machine?.isDrained ?? true else { return }
        drained()
    }

    private func armTimer() {
        guard let next = machine.nextWakeup else { return }
        if let timerAt, timerAt <= next { return }
        timerAt = next
        let incarnation = self.incarnation
        world.scheduler.at(next) { [weak self] in
            guard let self, self.incarnation == incarnation, self.machine != nil, self.timerAt == next else { return }
            self.timerAt = nil
            self.step { $0.timePassed(now: $1) }
        }
    }

    private func carryOut(_ action: DispatchMachine.Action) {
        let incarnation = self.incarnation
        switch action {
        case .send(let attempt):
            // As DispatchEngine's senders: not sent if its partition was given up meanwhile (before
            // or after its announcement, which is then taken back).
            guard machine.owns(attempt.entry) else {
                world.trace("\(name): \(attempt.push.apnsID.prefix(8)) not sent: its partition was given up")
                step { $0.withdrawn(attempt, announced: false, now: $1) }
                return
            }
            if let announcement = attempt.announcement {
                world.persist(.outcome(announcement), key: attempt.key, by: self, incarnation: incarnation) { [weak self] in
                    guard let self, self.incarnation == incarnation, self.machine != nil else { return }
                    guard self.machine.owns(attempt.entry) else {
                        self.world.trace("\(self.name): \(attempt.push.apnsID.prefix(8)) announced, not sent: its partition was given up")
                        self.step { $0.withdrawn(attempt, announced: true, now: $1) }
                        return
                    }
                    self.sendToAPNs(attempt, incarnation: incarnation)
                }
            } else {
                sendToAPNs(attempt, incarnation: incarnation)
            }
        case .publish(let outcome, let ticket, let copies):
            world.trace("\(name): outcome \(outcome.result.rawValue) for \(outcome.requestId.prefix(8)) (ticket \(ticket), copies \(copies))")
            world.persist(.outcome(outcome), key: outcome.key ?? "", by: self, incarnation: incarnation) { [weak self] in
                guard let self, self.incarnation == incarnation, self.machine != nil else { return }
                self.tickets.done(ticket)
                for copy in copies { self.tickets.done(copy) }
                self.step { $0.outcomePersisted(outcome.requestId, now: $1) }
            }
        case .release(let ticket):
            tickets.done(ticket)
        case .note(let note):
            world.trace("\(name): note \(note.result.rawValue) for \(note.requestId.prefix(8))")
            world.persist(.outcome(note), key: note.key ?? "", by: self, incarnation: incarnation) { [weak self] in
                guard let self, self.incarnation == incarnation, self.machine != nil else { return }
                self.step { $0.notePersisted(note, now: $1) }
            }
        case .abandon(let abandoned):
            tickets.abandon(abandoned)
        case .renewProviderToken, .reconnect, .createChannel, .recordChannel, .deleteChannel:
            break
        }
    }

    private func sendToAPNs(_ attempt: DispatchMachine.Attempt, incarnation: Int) {
        guard self.incarnation == incarnation, machine != nil else { return }
        let started = world.now
        world.apns.send(attempt, from: self) { [weak self] result in
            guard let self, self.incarnation == incarnation, self.machine != nil else { return }
            let seconds = self.world.now.timeIntervalSince(started)
            self.step { $0.answered(attempt, result, seconds: seconds, now: $1) }
        }
    }
}

extension DispatcherPolicy {
    /// The service's drain limit on SIGTERM (``DispatcherService``'s `drainTimeout`).
    var drainTimeoutSeconds: TimeInterval { 8 }
}
