@testable import ContentService
import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
import IsletTokens

/// The simulation's wall clock: the scheduler's time. (The engine only reads it.)
final class SimClock: WallClock, @unchecked Sendable {
    unowned let scheduler: SimScheduler
    init(scheduler: SimScheduler) { self.scheduler = scheduler }
    var now: WallInstant { WallInstant(scheduler.now) }
    var minimumResolution: Duration { .milliseconds(1) }
    func sleep(until deadline: WallInstant, tolerance: Duration?) async throws {
        fatalError("the simulation's engines never sleep")
    }
}

/// One content-service process in the simulation: the real ``ContentEngine`` (every decision: the
/// sequence rules, the templates' payloads, timestamps and their partition floors, the alert
/// policy, the memory, the freshness monitor, what an outcome means), with the real templates,
/// driven the way ``ContentServiceLoop``, ``RequestSender`` and ``ContentMemoryLoader`` drive it:
/// - an event read: prepared; its requests committed to the memory, then handed to Kafka in order,
///   acknowledged in the background (a refused one, or one whose acknowledgement was lost, is sent
///   again — the same request — before the next event: a later event's request may land first);
///   the event is marked processed once all its requests are acknowledged, in offset order;
/// - the freshness monitor every ``FreshnessPolicy/checkInterval``: its requests the same way;
/// - a partition assigned: its activities' memories restored from the requests and outcomes on the
///   topics (the changelog is a shortcut to the same), then followed; revoked: its events under
///   way finish (at most 8 s), its memories kept until the next assignment says whether it came back;
/// - the token table: every partition of the tokens topic, a little behind;
/// - the changelog: every 5 s (a round) the memories that changed in its partitions are written to
///   `islet.content-memory.v1`; an event that schedules a step (``ActivityEvent/at``) is marked
///   processed only after the next round (``ContentChanges/afterNextRound``), and left to the next
///   owner when its partition is revoked before; a partition assigned is restored from its
///   changelog first (the steps live there only), then from the requests and outcomes;
/// - the step sender (``StepSender``): every second the steps due are prepared and sent as events are.
/// One lane: an activity's events are in order either way.
final class SimContent: SimProcess, @unchecked Sendable {
    let name: String
    unowned let world: SimWorld
    var phase = SimPhase.down
    private(set) var incarnation = 0
    private(set) var joins = 0

    private var engine: ContentEngine!
    private(set) var tokens = PartitionTokens.whole()
    private var tracker = OffsetTracker()
    private var positions: [Int32: Int64] = [:]
    private var epochs: [Int32: Int] = [:]
    private var lastEpoch = 0
    private var marks: [Int32: Int64] = [:]
    /// Activity partitions whose memories are here (restored), and those revoked and kept.
    private var held: Set<Int32> = []
    private var kept: Set<Int32> = []
    private var owned: Set<Int32> { Set(positions.keys) }
    var readScheduled = false
    private var busy = false
    /// Requests Kafka did not take, to send again (in order) before the next event.
    private var failed: [(request: PushRequest, done: () -> Void)] = []
    private var repairing = false
    var revocations: [(partitions: Set<Int32>, done: () -> Void)] = []
    var tokenPositions: [Int32: Int64] = [:]
    /// How often its replica of the requests topic is seconds behind (a draw per record).
    var replicaLagging = 0.03
    /// Events that scheduled a step, waiting for the next changelog round to be marked processed.
    private var awaitingRound: [(partition: Int32, work: OffsetTracker.Work)] = []
    /// Since when each partition it owns has been here (restored): a step of it due before then is
    /// its to send within 3 s of then, one due since then within 3 s of its time.
    private var ownedSince: [Int32: Date] = [:]
    /// Requests handed to Kafka and not acknowledged yet (a round waits for them: RequestSender.settle).
    private var inFlight = 0

    init(name: String, world: SimWorld) {
        self.name = name
        self.world = world
    }

    var group: SimGroup { world.contents }
    var mayRead: Bool { phase == .running && !busy }

    static let templates: [String: ActivityTemplate] = {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Services/ContentService/Templates").path
        return try! TemplateLoader.load(directory: directory)
    }()
    static let keyring = LinkKeyring(signing: try! LinkKey(id: "k1", secret: Array("a-simulation-link-key-of-32-bytes!".utf8)))

    // MARK: Process lifecycle

    func start() {
        precondition(phase == .down)
        incarnation += 1
        joins = 1
        phase = .running
        tokens = PartitionTokens.whole()
        engine = ContentEngine(
            assembler: PayloadAssembler(templates: Self.templates, keyring: Self.keyring), tokens: tokens, clock: SimClock(scheduler: world.scheduler),
            checksAssembledAhead: true)
        tracker = OffsetTracker()
        positions = [:]
        epochs = [:]
        marks = [:]
        held = []
        kept = []
        readScheduled = false
        busy = false
        failed = []
        repairing = false
        revocations = []
        awaitingRound = []
        ownedSince = [:]
        inFlight = 0
        // The token table: every partition from its start (TokenTableLoader), then followed.
        tokenPositions = [:]
        for partition in 0..<world.tokens.partitionCount {
            tokenPositions[partition] = 0
            catchUpTokens(partition, to: world.tokens.end(partition))
        }
        // Loaded (as the app does once TokenTableLoader is ready): devices read from now on may
        // have missed their activity's latest content.
        engine.watchLateDevices()
        world.trace("\(name): starts (process \(incarnation))")
        world.contents.join(self)
        scheduleMonitor()
        scheduleChangelogRound()
        scheduleSteps()
    }

    func forgetMemory() {
        engine = nil
    }

    /// SIGTERM: the consumer stops (its events under way finish, then it commits and leaves).
    func terminate(restartAfter: TimeInterval?) {
        guard let incarnation = beginStopping() else { return }
        leaveGroup(incarnation: incarnation, restartAfter: restartAfter)
    }

    // MARK: The group's calls

    func revoke(_ partitions: [Int32], done: @escaping () -> Void) {
        guard isUp, engine != nil else { return done() }
        world.trace("\(name): revoking \(partitions)")
        tracker.beginRevoking(partitions.map { KafkaTopicPartition(topic: SimWorld.eventsTopic, partition: $0) })
        tracker.abandonUnstarted(Set(partitions.map { KafkaTopicPartition(topic: SimWorld.eventsTopic, partition: $0) }))
        // ContentChanges.abandonAwaiting: an event waiting for a round is left to the next owner at once.
        let leaving = Set(partitions)
        for (_, work) in awaitingRound.filter({ leaving.contains($0.partition) }) { tracker.abandon(work) }
        awaitingRound.removeAll { leaving.contains($0.partition) }
        for partition in partitions { ownedSince[partition] = nil }
        awaitRevocation(of: partitions, done: done, atMost: 8)
    }

    func revocationOverran(_ partitions: [Int32], done: () -> Void) {
        world.trace("\(name): its revoked partitions' events did not finish within 8 s")
        done()
    }

    func marked(_ partition: Int32) -> Int64? { isUp ? marks[partition] : nil }

    func revocationTimedOut(_ partitions: [Int32]) {}

    func revoked(_ partitions: [Int32]) {
        guard isUp, engine != nil else { return }
        tracker.revoke(partitions.map { KafkaTopicPartition(topic: SimWorld.eventsTopic, partition: $0) })
        revocations.removeAll { !$0.partitions.isDisjoint(with: partitions) }
        for partition in partitions {
            positions[partition] = nil
            epochs[partition] = nil
            marks[partition] = nil
            ownedSince[partition] = nil
        }
        // Their last round (ChangelogWriter.revoked), then kept until the next assignment
        // (ContentMemoryLoader.revoked); timestamp floors released.
        if phase == .running { writeRound(Set(partitions)) }
        kept.formUnion(partitions)
        engine.releaseTimestampFloors(partitions)
        world.trace("\(name): revoked \(partitions)")
        scheduleRead()
    }

    func assigned(_ partitions: [Int32]) {
        guard isUp, engine != nil else { return }
        world.trace("\(name): assigned \(partitions)")
        // ContentMemoryLoader.restore: those kept and not given back are forgotten; those not held
        // are read from the topics (their activities' requests and outcomes).
        let gone = kept.subtracting(partitions)
        kept = []
        if !gone.isEmpty {
            held.subtract(gone)
            _ = engine.forget(partitions: gone)
        }
        let missing = Set(partitions).subtracting(held)
        held.formUnion(missing)
        if !missing.isEmpty { restore(missing) }
        for partition in partitions {
            lastEpoch += 1
            epochs[partition] = lastEpoch
            positions[partition] = world.contents.committedOffset(partition)
            if ownedSince[partition] == nil { ownedSince[partition] = world.now }
        }
        engine.trackChanges(of: owned)
        scheduleRead()
    }

    /// The activities of `partitions`: their changelog first (ContentMemoryLoader: the latest
    /// memory of each activity, with its steps), then the requests and outcomes topics move them on.
    private func restore(_ partitions: Set<Int32>) {
        for partition in partitions {
            var latest: [String: ContentMemoryRecord.Activity?] = [:]
            for record in world.changelog.records(partition) {
                if case .memory(let memory) = record.value { latest[record.key] = memory }
            }
            for (key, record) in latest.sorted(by: { $0.key < $1.key }) { engine.restore(key, record.map(ActivityMemory.init)) }
        }
        for partition in 0..<world.requests.partitionCount {
            for record in world.requests.records(partition) {
                guard case .request(let request) = record.value, let activityPartition = activityPartition(of: request),
                    partitions.contains(activityPartition)
                else { continue }
                engine.replay(request, partition: activityPartition, storedAt: KafkaPosition(partition: partition, offset: record.offset))
            }
        }
        for partition in 0..<world.outcomes.partitionCount {
            for record in world.outcomes.records(partition) {
                guard case .outcome(let outcome) = record.value, let activityId = outcome.activityId ?? requestActivity(outcome.requestId),
                    partitions.contains(world.events.partition(ofKey: activityId))
                else { continue }
                engine.record(outcome, at: KafkaPosition(partition: partition, offset: record.offset))
            }
        }
    }

    private func activityPartition(of request: PushRequest) -> Int32? {
        (request.activityId ?? request.sourceActivityId).map { world.events.partition(ofKey: $0) }
    }

    private func requestActivity(_ requestId: String) -> String? { world.requestsById[requestId]?.sourceActivityId }

    // MARK: Following the topics

    /// A request written (by anyone): applied when its activity's memory is here.
    func requestAppended(_ request: PushRequest, partition: Int32, offset: Int64) {
        guard isUp, engine != nil, let activityPartition = activityPartition(of: request), held.contains(activityPartition) else { return }
        let incarnation = self.incarnation
        // A replica of the topic a little behind, now and then (often, in some runs) seconds behind.
        let lag = world.random.chance(replicaLagging) ? world.random.seconds(1, 6) : world.random.seconds(0.001, 0.2)
        world.scheduler.after(lag) { [weak self] in
            guard let self, self.incarnation == incarnation, self.engine != nil, self.held.contains(activityPartition) else { return }
            self.engine.replay(request, partition: activityPartition, storedAt: KafkaPosition(partition: partition, offset: offset))
        }
    }

    func outcomeAppended(_ outcome: PushOutcome, partition: Int32, offset: Int64) {
        guard isUp, engine != nil, let activityId = outcome.activityId ?? requestActivity(outcome.requestId) else { return }
        let activityPartition = world.events.partition(ofKey: activityId)
        guard held.contains(activityPartition) else { return }
        let incarnation = self.incarnation
        world.scheduler.after(world.random.seconds(0.001, 0.5)) { [weak self] in
            guard let self, self.incarnation == incarnation, self.engine != nil, self.held.contains(activityPartition) else { return }
            self.engine.record(outcome, at: KafkaPosition(partition: partition, offset: offset))
        }
    }

    func tokenReplicaLag() -> TimeInterval {
        world.random.chance(0.03) ? world.random.seconds(1, 10) : world.random.seconds(0.001, 0.3)
    }

    // MARK: Events

    /// A backend's call to this instance's API (``EventIntake``): the event checked, and assembled
    /// ahead of its publication (used when it is read back, if nothing it read has changed).
    func checkAhead(_ event: ActivityEvent) {
        guard phase == .running, let engine else { return }
        let partition = world.events.partition(ofKey: MessageKey.activity(event.activityId))
        do {
            // Kept only where it will be read back, as EventIntake keeps it.
            _ = try engine.prepareAhead(event, partition: partition, keep: owns(partition))
        } catch {
            world.trace("\(name): event \(event.eventId) of \(event.activityId) checked ahead: \(error.description)")
        }
    }

    /// Whether this instance reads the partition's events now.
    func owns(_ partition: Int32) -> Bool { phase == .running && positions[partition] != nil }

    func eventAppended(partition: Int32) {
        if positions[partition] != nil { scheduleRead() }
    }

    func readNext() {
        guard phase == .running, !busy, engine != nil else { return }
        // Requests Kafka refused go again first, before anything that may follow them.
        if !failed.isEmpty { return repair() }
        let ready = positions.filter { $0.value < world.events.end($0.key) }.map(\.key).sorted()
        guard !ready.isEmpty else { return }
        let partition = world.random.pick(ready)
        let offset = positions[partition]!
        positions[partition] = offset + 1
        let message = world.events.message(partition, offset)
        guard let work = tracker.beginWork(message), tracker.start(work) else { return scheduleRead() }
        guard case .event(let event) = world.events.records(partition)[Int(offset)].value else { fatalError() }
        let decision: ContentEngine.Decision
        do {
            let used = engine.eventsAssembledOnce
            decision = try engine.prepare(event, partition: partition)
            if engine.eventsAssembledOnce > used {
                world.assembledAheadUsed += 1
                world.trace("\(name): event \(event.eventId) as assembled at the check")
                if engine.assembledAheadMismatchCount > 0 {
                    world.violate("assembled once", "\(name): event \(event.eventId)'s kept assembly is not what its inputs make at the check's time")
                }
            }
        } catch {
            world.trace("\(name): event \(event.eventId) of \(event.activityId) refused: \(error.description)")
            complete(work)
            return scheduleRead()
        }
        switch decision {
        case .ignore(let why):
            world.trace("\(name): event \(event.eventId) of \(event.activityId) ignored: \(why)")
            complete(work)
        case .schedule(let scheduled):
            // Processed once a changelog round wrote the step: a crash before reads the event again.
            world.trace("\(name): event \(event.eventId) of \(event.activityId) scheduled for \(event.at.map { $0.timeIntervalSince(SimWorld.start) } ?? 0) s")
            engine.commit(scheduled)
            awaitingRound.append((partition, work))
        case .send(let prepared):
            if event.kind == .end, !engine.steps(of: prepared.activityKey).isEmpty {
                // (One overdue here was flagged by the step sender's check already, unless Kafka held it.)
                world.trace("\(name): the end of \(event.activityId) supersedes its steps")
                world.stepsSupersededByEnd.insert(event.activityId)
            }
            world.trace("\(name): event \(event.eventId) (#\(event.sequence) of \(event.activityId)) → \(prepared.requests.map { "\($0.event.rawValue) \($0.requestId.prefix(8)) t\($0.apnsTimestamp)" })")
            enqueue(prepared) { [weak self] in self?.complete(work) }
        }
        scheduleRead()
    }

    private func complete(_ work: OffsetTracker.Work) {
        if let release = tracker.complete(work), positions[release.partition] != nil {
            marks[release.partition] = max(marks[release.partition] ?? 0, release.offset + 1)
        }
        checkRevocations()
    }

    /// RequestSender.enqueue: the memory moves on, the requests go to Kafka in order.
    private func enqueue(_ prepared: ContentEngine.Prepared, done: @escaping () -> Void) {
        engine.commit(prepared)
        var remaining = prepared.requests.count
        guard remaining > 0 else { return done() }
        let one = { remaining -= 1; if remaining == 0 { done() } }
        for request in prepared.requests { produce(request, done: one) }
    }

    private func produce(_ request: PushRequest, done: @escaping () -> Void) {
        let incarnation = self.incarnation
        inFlight += 1
        world.produceRequest(request, by: name) { [weak self] position in
            guard let self, self.incarnation == incarnation, self.engine != nil else { return }
            self.inFlight -= 1
            if let position {
                self.engine.stored(request, at: position)
                done()
            } else {
                self.failed.append((request, done))
                self.scheduleRead()
            }
        }
    }

    /// RequestSender.repair: each refused request again, in order, until Kafka takes it.
    private func repair() {
        guard !repairing, let (request, done) = failed.first else { return }
        repairing = true
        busy = true
        let incarnation = self.incarnation
        world.trace("\(name): sends \(request.requestId.prefix(8)) again")
        world.produceRequest(request, by: name) { [weak self] position in
            guard let self, self.incarnation == incarnation, self.engine != nil else { return }
            self.repairing = false
            self.busy = false
            if let position {
                self.failed.removeFirst()
                self.engine.stored(request, at: position)
                done()
            }
            self.scheduleRead()
        }
    }

    func checkRevocations() {
        var index = 0
        while index < revocations.count {
            let partitions = Set(revocations[index].partitions.map { KafkaTopicPartition(topic: SimWorld.eventsTopic, partition: $0) })
            if !tracker.isOpen(in: partitions) {
                world.trace("\(name): its revoked partitions' events finished")
                revocations.remove(at: index).done()
            } else {
                index += 1
            }
        }
    }

    // MARK: The changelog and the steps

    /// A changelog round every 5 s (`ISLET_CONTENT_CHANGELOG_INTERVAL_MS`): the memories of its
    /// partitions that changed, written; then the events that waited for a round are processed.
    /// (Kafka takes every round here: a refused round is the real writer's to retry.)
    private func scheduleChangelogRound() {
        let incarnation = self.incarnation
        world.scheduler.after(5) { [weak self] in
            guard let self, self.incarnation == incarnation, self.isUp, self.engine != nil else { return }
            if self.phase == .running { self.writeRound(self.owned) }
            if self.world.now.timeIntervalSince(SimWorld.start) < Simulation.runSeconds - 30 { self.scheduleChangelogRound() }
        }
    }

    /// One round over `partitions`: only once every request sent is acknowledged (a memory must not
    /// count a request Kafka may not have: RequestSender.settle), else not now; each memory written
    /// as the changelog carries it (through JSON); then the events that waited for it are processed.
    private func writeRound(_ partitions: Set<Int32>) {
        guard inFlight == 0, failed.isEmpty else {
            world.trace("\(name): changelog round put off: requests not acknowledged yet")
            return
        }
        let waiting = awaitingRound.filter { partitions.contains($0.partition) }
        awaitingRound.removeAll { partitions.contains($0.partition) }
        for item in engine.takeUnwritten(partitions: partitions) {
            let record = item.memory.map { $0.record(activityKey: item.activityKey, partition: item.partition) }
            let carried = record.map { try! IsletJSON.decodeValue(ContentMemoryRecord.Activity.self, from: try! IsletJSON.encode($0)) }
            world.append(.memory(carried), key: item.activityKey, writer: name)
        }
        for (_, work) in waiting { complete(work) }
    }

    /// StepSender: every second, the steps due (of the partitions it owns), prepared as the events
    /// they are and sent; then no step of a partition held since before its time may be more than
    /// 3 s overdue (the sender runs every second; Kafka refusing writes holds it, as it holds events).
    private func scheduleSteps() {
        let incarnation = self.incarnation
        world.scheduler.after(1) { [weak self] in
            guard let self, self.incarnation == incarnation, self.isUp, self.engine != nil else { return }
            // (As the service's sender: nothing to do before the earliest step is due. A step kept
            // and not queued is caught at the end: no request was made of it.)
            if self.phase == .running, !self.busy, self.failed.isEmpty, let due = self.engine.nextStepDue, due <= self.world.now {
                for step in self.engine.dueSteps(owned: self.owned) {
                    let decision = (try? self.engine.prepare(step.event, partition: step.partition, firing: true)) ?? .ignore("refused at its time")
                    if case .send(let prepared) = decision {
                        self.world.trace("\(self.name): step \(step.event.eventId) of \(step.event.activityId) sent → \(prepared.requests.map { "\($0.event.rawValue) \($0.requestId.prefix(8))" })")
                        self.enqueue(prepared) {}
                    } else {
                        self.world.trace("\(self.name): step \(step.event.eventId) of \(step.event.activityId) not sent: \(decision)")
                        self.engine.dropStep(step)
                    }
                }
                self.checkStepsOnTime()
            }
            if self.world.now.timeIntervalSince(SimWorld.start) < Simulation.runSeconds - 30 { self.scheduleSteps() }
        }
    }

    private func checkStepsOnTime() {
        for (activityId, versions) in world.stepVersions.sorted(by: { $0.key < $1.key }) {
            for step in overdueSteps(of: activityId) where versions.contains(step.eventId) {
                world.violate(
                    "step on time",
                    "\(name): step \(step.eventId) of \(activityId), due at \(step.at.map { $0.timeIntervalSince(SimWorld.start) } ?? 0) s, still kept at \(world.now.timeIntervalSince(SimWorld.start)) s")
            }
        }
    }

    /// The steps of an activity of a partition this instance owns that are past their deadline: 3 s
    /// after their time, or after the partition came here when they were due before (a rebalance).
    private func overdueSteps(of activityId: String) -> [ActivityEvent] {
        let partition = world.events.partition(ofKey: activityId)
        guard let since = ownedSince[partition], positions[partition] != nil else { return [] }
        let key = MessageKey.activity(bundleId: SimWorld.bundleId, activityId: activityId)
        // A dead token's steps wait for the app to register it again.
        if engine.memory(of: key)?.gone == true { return [] }
        return engine.steps(of: key).filter { step in
            guard let at = step.at else { return false }
            return world.now.timeIntervalSince(max(at, since)) > 3
        }
    }

    // MARK: The freshness monitor

    /// One pass (FreshnessMonitor): re-sends of content that went stale or was not delivered, ends
    /// of activities past their lifetime. (The token invalidation that follows such an end is not
    /// written: token-registry's side of it is not simulated.)
    private func sweep() {
        for prepared in engine.sweep(owned: owned) {
            if prepared.requests.contains(where: { $0.event == .end }), !engine.steps(of: prepared.activityKey).isEmpty {
                world.stepsSupersededByEnd.insert(String(prepared.activityKey.drop { $0 != "/" }.dropFirst()))
            }
            world.trace("\(name): freshness monitor: \(prepared.requests.map { "\($0.event.rawValue) \($0.requestId.prefix(8)) of \($0.activityId ?? "")" })")
            enqueue(prepared) {}
        }
    }

    private func scheduleMonitor() {
        let incarnation = self.incarnation
        world.scheduler.after(5) { [weak self] in
            guard let self, self.incarnation == incarnation, self.phase == .running, self.engine != nil else { return }
            if self.failed.isEmpty {
                self.sweep()
                // Activities whose latest payload is on Kafka only (acknowledged, so not kept in
                // memory): read there (RequestPayloads), handed back, looked at again.
                let wanted = self.engine.takePayloadsToRead()
                if !wanted.isEmpty {
                    var found: [String: (position: KafkaPosition, request: PushRequest)] = [:]
                    var lost: [ContentEngine.PayloadToRead] = []
                    for item in wanted {
                        let records = self.world.requests.records(item.position.partition)
                        if Int(item.position.offset) < records.count, case .request(let request) = records[Int(item.position.offset)].value,
                            request.requestId == item.requestId
                        {
                            found[item.activityKey] = (item.position, request)
                        } else {
                            lost.append(item)
                        }
                    }
                    self.engine.restorePayloads(found, lost: lost)
                    self.sweep()
                }
            }
            // (Until the end of the run's activity: the monitor stops with the workload's horizon.)
            if self.world.now.timeIntervalSince(SimWorld.start) < Simulation.runSeconds - 60 { self.scheduleMonitor() }
        }
    }
}
