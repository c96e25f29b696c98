import Testing

@testable import IsletKafka

/// The consumer's state machine, without librdkafka: each transition and the action it returns.
@Suite("Kafka consumer state machine")
struct ConsumerMachineTests {
    let policy = KafkaHealthPolicy(unreachableAfter: .seconds(5), maximumRecoveries: 3, recoveryBackoff: .milliseconds(500), maximumRecoveryBackoff: .seconds(30))
    let p0 = KafkaTopicPartition(topic: "t", partition: 0)
    let p1 = KafkaTopicPartition(topic: "t", partition: 1)
    let second: UInt64 = 1_000_000_000

    func makeMachine(capacity: Int = 100, inGroup: Bool = true) -> ConsumerMachine {
        var machine = ConsumerMachine(capacity: capacity, inGroup: inGroup, policy: policy)
        let result1 = machine.start()
        #expect(result1)
        return machine
    }

    /// A message of `partition` read under its current assignment (stamped as the poll loop stamps it).
    func message(_ partition: KafkaTopicPartition, _ offset: Int64, in machine: ConsumerMachine) -> KafkaMessage {
        var message = KafkaMessage(topic: partition.topic, partition: partition.partition, offset: offset, key: nil, value: nil)
        message.assignmentEpoch = machine.assignmentEpochs[partition] ?? 0
        return message
    }

    /// Takes what is buffered, as the caller's loop does.
    func taken(_ machine: inout ConsumerMachine) -> [KafkaConsumerEvent] {
        machine.take(nil, cancelled: false)?.value?.events ?? []
    }

    func offsets(_ events: [KafkaConsumerEvent]) -> [Int64] {
        events.compactMap { if case .message(let message) = $0 { message.offset } else { nil } }
    }

    @Test("an assignment gives each partition a new epoch, is buffered as an event, and ends the wait for the group")
    func assign() {
        var machine = makeMachine()
        #expect(machine.awaitingAssignment)
        let result2 = machine.assign([p0, p1])
        #expect(result2 == nil)
        let first = machine.assignmentEpochs
        #expect(Set(first.keys) == [p0, p1])
        #expect(!machine.awaitingAssignment)
        guard case .partitionsAssigned(let assigned) = taken(&machine).first else {
            Issue.record("no assignment event")
            return
        }
        #expect(assigned == [p0, p1])
        _ = machine.assign([p0])
        #expect(machine.assignmentEpochs[p0] != first[p0])
        #expect(machine.assignmentEpochs[p1] == first[p1])
    }

    @Test("marks keep the highest offset of each partition and are handed over once")
    func marks() {
        var machine = makeMachine()
        _ = machine.assign([p0, p1])
        let result3 = machine.mark(message(p0, 7, in: machine))
        #expect(result3)
        let result4 = machine.mark(message(p0, 3, in: machine))
        #expect(result4)
        let result5 = machine.mark(message(p1, 0, in: machine))
        #expect(result5)
        let result6 = machine.takeMarkedOffsets()
        #expect(result6 == [p0: 8, p1: 1])
        let result7 = machine.takeMarkedOffsets()
        #expect(result7 == [:])
        // A late mark of an earlier message never moves the stored offset back.
        let result8 = machine.mark(message(p0, 5, in: machine))
        #expect(result8)
        let result9 = machine.takeMarkedOffsets()
        #expect(result9 == [:])
    }

    @Test("a revocation runs the caller's handler with the buffer dropped, stores what was marked meanwhile, and refuses marks after it")
    func revoke() {
        var machine = makeMachine()
        machine.setRevocationHandler(.init(timeout: .seconds(1), body: { _ in }))
        _ = machine.assign([p0, p1])
        _ = taken(&machine)
        let held = message(p0, 10, in: machine)
        _ = machine.deliver([.message(held), .message(message(p0, 11, in: machine)), .message(message(p1, 4, in: machine))])
        let generation = machine.generation
        guard case .finishWork = machine.beginRevocation([p0], lost: false) else {
            Issue.record("the caller's handler is not run")
            return
        }
        #expect(machine.generation != generation)
        #expect(machine.stillAssigned([.message(held)]).isEmpty)
        // The handler finishes the work it held: its mark still counts.
        let result10 = machine.mark(held)
        #expect(result10)
        let result11 = machine.endRevocation([p0], lost: false)
        #expect(result11 == [p0: 11])
        let result12 = machine.mark(held)
        #expect(!result12)
        let result13 = machine.revoked([p0])
        #expect(result13 == nil)
        let events = taken(&machine)
        #expect(offsets(events) == [4])
        guard case .partitionsRevoked(let revoked) = events.last else {
            Issue.record("no revocation event")
            return
        }
        #expect(revoked == [p0])
        #expect(machine.assignmentEpochs.keys.sorted { $0.partition < $1.partition } == [p1])
    }

    @Test("lost partitions tell the loss handler, store nothing, and make a group member wait for the group again")
    func lost() {
        var machine = makeMachine()
        machine.setLossHandler { _ in }
        machine.setRevocationHandler(.init(timeout: .seconds(1), body: { _ in }))
        _ = machine.assign([p0])
        let read = message(p0, 3, in: machine)
        let result14 = machine.mark(read)
        #expect(result14)
        guard case .tellLoss = machine.beginRevocation([p0], lost: true) else {
            Issue.record("the loss handler is not told")
            return
        }
        let result15 = machine.endRevocation([p0], lost: true)
        #expect(result15 == [:])
        #expect(machine.awaitingAssignment)
        let result16 = machine.mark(read)
        #expect(!result16)
        #expect(machine.lostWithHandle == [])
        #expect(makeMachine(inGroup: false).lostWithHandle == nil, "a replica keeps what it buffered")
    }

    @Test("a group member that owns no partitions and loses its handle waits for the group again")
    func lostWithNothingOwned() {
        var machine = makeMachine()
        _ = machine.assign([])
        #expect(!machine.awaitingAssignment)
        let owned = machine.lostWithHandle ?? [p0]
        #expect(owned.isEmpty)
        guard case .none = machine.beginRevocation(owned, lost: true) else {
            Issue.record("nothing to tell")
            return
        }
        let stored = machine.endRevocation(owned, lost: true)
        #expect(stored.isEmpty)
        #expect(machine.awaitingAssignment)
    }

    @Test("a full buffer waits for the caller's loop, then pauses the owned partitions; half the buffer taken resumes them")
    func backpressure() {
        var machine = makeMachine(capacity: 4)
        _ = machine.assign([p0, p1])
        _ = taken(&machine)
        let result17 = machine.backpressure(waited: false)
        #expect(result17 == .none)
        _ = machine.deliver((0..<4).map { .message(message(p0, $0, in: machine)) })
        let result18 = machine.backpressure(waited: false)
        #expect(result18 == .waitForSpace)
        guard case .pause(let paused) = machine.backpressure(waited: true) else {
            Issue.record("not paused")
            return
        }
        #expect(Set(paused) == [p0, p1])
        // Paused already: no wait, nothing more to pause.
        let result19 = machine.backpressure(waited: false)
        #expect(result19 == .none)
        // The loop takes the buffer: the poll thread that waited is woken.
        let result20 = machine.take(nil, cancelled: false)
        #expect(result20?.wakePollThread == false)
        _ = machine.deliver((4..<7).map { .message(message(p0, $0, in: machine)) })
        let result21 = machine.backpressure(waited: false)
        #expect(result21 == .none, "3 of 4 is more than half")
        _ = taken(&machine)
        _ = machine.deliver((7..<9).map { .message(message(p0, $0, in: machine)) })
        guard case .resume(let resumed) = machine.backpressure(waited: false) else {
            Issue.record("not resumed at half the buffer")
            return
        }
        #expect(Set(resumed) == [p0, p1])
        let result22 = machine.backpressure(waited: false)
        #expect(result22 == .none)
    }

    @Test("the poll thread waiting for space is woken when the loop takes the buffer, and not paused when it had room")
    func waitForSpace() {
        var machine = makeMachine(capacity: 2)
        _ = machine.assign([p0])
        _ = taken(&machine)
        _ = machine.deliver([.message(message(p0, 0, in: machine)), .message(message(p0, 1, in: machine))])
        let result23 = machine.backpressure(waited: false)
        #expect(result23 == .waitForSpace)
        #expect(!machine.spaceOrStop)
        let result24 = machine.take(nil, cancelled: false)
        #expect(result24?.wakePollThread == true)
        #expect(machine.spaceOrStop)
        let result25 = machine.backpressure(waited: true)
        #expect(result25 == .none)
    }

    @Test("a fatal error recreates the handle: at once the first time, then after growing backoffs, until the health says failed")
    func fatalRecreatesWithBackoff() {
        var machine = makeMachine()
        _ = machine.assign([p0])
        let fenced = KafkaError(code: .fatal, message: "fenced", isFatal: true)
        #expect(machine.nextStep(fatal: nil) == .poll)
        #expect(machine.nextStep(fatal: fenced) == .recreate(after: fenced))
        #expect(machine.lostWithHandle == [p0])
        let result26 = machine.beginRecovery(reason: fenced)
        #expect(result26 == 1)
        #expect(machine.healthSnapshot(lastContact: 1, loginRefused: nil).phase == .recovering(reason: "\(fenced)"))
        #expect(machine.nextRecreation() == .make(after: .zero))
        machine.recreationFailed()
        #expect(machine.nextRecreation() == .make(after: .milliseconds(500)))
        machine.recreationFailed()
        #expect(machine.nextRecreation() == .make(after: .seconds(1)))
        machine.recreated()
        #expect(machine.recoveries == 1)
        let health = machine.healthSnapshot(lastContact: second, loginRefused: nil).health(now: second, policy: policy)
        #expect(health.status == .failed, "three in a row without a success")
        // The group assigns the new member partitions: it works again.
        _ = machine.assign([p0])
        #expect(machine.healthSnapshot(lastContact: second, loginRefused: nil).health(now: second, policy: policy) == .ready)
        let result27 = machine.beginRecovery(reason: fenced)
        #expect(result27 == 1)
        #expect(machine.nextRecreation() == .make(after: .zero))
    }

    @Test("a replica has recovered once its new handle is assigned its partitions; a group member once the group assigns it")
    func recoveryOfAReplica() {
        var replica = makeMachine(inGroup: false)
        #expect(!replica.awaitingAssignment)
        let fatal = KafkaError(code: .fatal, message: "x", isFatal: true)
        _ = replica.beginRecovery(reason: fatal)
        replica.recreated()
        #expect(replica.healthSnapshot(lastContact: 1, loginRefused: nil).consecutiveRecoveries == 0)
        var member = makeMachine()
        _ = member.beginRecovery(reason: fatal)
        member.recreated()
        #expect(member.healthSnapshot(lastContact: 1, loginRefused: nil).consecutiveRecoveries == 1)
    }

    @Test("a stop finishes with a close, a simulated crash with an abandon, whatever else is pending; no handle is made after it")
    func stopAndAbandon() {
        let fatal = KafkaError(code: .fatal, message: "x", isFatal: true)
        var stopped = makeMachine()
        stopped.requestStop()
        #expect(stopped.nextStep(fatal: fatal) == .finish(.close))
        #expect(stopped.nextRecreation() == .stop)
        let result28 = stopped.backpressure(waited: false)
        #expect(result28 == .none)
        #expect(stopped.spaceOrStop)
        var crashed = makeMachine()
        crashed.requestAbandon()
        #expect(crashed.nextStep(fatal: nil) == .finish(.abandon))
        #expect(crashed.abandonRequested)
    }

    @Test("finishing hands the loop what is buffered, then nothing: its loop ends")
    func finish() {
        var machine = makeMachine()
        _ = machine.assign([p0])
        _ = machine.deliver([.message(message(p0, 0, in: machine))])
        let result29 = machine.finish()
        #expect(result29 == nil)
        #expect(machine.lifecycle == .finished)
        #expect(offsets(taken(&machine)) == [0])
        let last = machine.take(nil, cancelled: false)
        #expect(last != nil && last?.value == nil)
        #expect(machine.healthSnapshot(lastContact: 1, loginRefused: nil).phase == .stopping)
    }

    @Test("a starved group member gets a longer fetch wait while the cluster answers; its new handle is measured afresh")
    func starvation() {
        var machine = makeMachine()
        _ = machine.assign([p0])
        machine.useFetchWait(milliseconds: 100, newHandle: false)
        let result30 = machine.lagLookDue(at: 1 * second)
        #expect(result30)
        let result31 = machine.lagLookDue(at: 2 * second)
        #expect(!result31)
        _ = machine.noteLag(known: [p0: 5_000], owned: [p0], at: 1 * second, clusterAnswers: true)
        let look = machine.noteLag(known: [p0: 5_000], owned: [p0], at: 40 * second, clusterAnswers: true)
        #expect(look.longerFetchWait == .milliseconds(400), "4 × 100 ms")
        #expect(machine.fetchWaitAfterStarving(at: 40 * second, clusterAnswers: false) == nil)
        machine.useFetchWait(milliseconds: 500, newHandle: true)
        #expect(machine.awaitingAssignment)
        #expect(machine.fetchWaitAfterStarving(at: 40 * second, clusterAnswers: true) == nil)
    }
}
