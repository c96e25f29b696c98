import Foundation
import IsletKafka
import IsletMessages
import NIOCore
@testable import APNsDispatcher

/// How often things go wrong in a run (each seed draws its own mix).
struct SimFaults {
    /// A produce Kafka refuses (not stored; the writer is told and tries again).
    var produceRefused = 0.0
    /// A produce stored whose acknowledgement is lost (the writer tries again: a copy).
    var produceAckLost = 0.0
    /// A request's produce held by a stalled broker for seconds (it lands late: past a
    /// revocation's 8 s, after the partition's next owner wrote the activity's next request).
    var produceStalled = 0.0
    /// A read of recent outcomes cut short.
    var outcomeReadFailure = 0.0
    /// APNs: answers other than 200 (by kind), and no answers.
    var tooManyRequests = 0.0
    var serverError = 0.0
    var notProcessed = 0.0
    var timeoutBeforeWrite = 0.0
    var timeoutAfterDelivery = 0.0
    var slowAnswer = 0.0

    static func draw(_ random: SimRandom) -> SimFaults {
        let level = random.pick([0.0, 0.02, 0.05, 0.12])
        return SimFaults(
            produceRefused: level * random.unit(), produceAckLost: level * random.unit() / 2, produceStalled: level * random.unit() / 4, outcomeReadFailure: level * 2 * random.unit(),
            tooManyRequests: level * random.unit(), serverError: level * random.unit(), notProcessed: level * random.unit(),
            timeoutBeforeWrite: level * random.unit() / 2, timeoutAfterDelivery: level * random.unit() / 2, slowAnswer: level * random.unit())
    }
}

/// A broken promise, with where it broke.
struct SimViolation: CustomStringConvertible {
    var invariant: String
    var detail: String
    var at: TimeInterval
    var description: String { "[\(invariant)] at \(String(format: "%.3f", at)) s: \(detail)" }
}

/// The whole simulated deployment of one seed: the cluster, the dispatchers, APNs and the phones,
/// the app and the backend (``SimWorkload``), and the ledger the invariants are checked against.
final class SimWorld {
    static let bundleId = "com.example.food"
    static let team = "TEAM123456"
    static let attributesType = "DeliveryAttributes"
    static let requestsTopic = "islet.push-requests.v1"
    static let eventsTopic = "islet.activity-events.v1"
    static let sessionTimeout: TimeInterval = 10
    static let start = Date(timeIntervalSince1970: 1_795_000_000)

    let seed: UInt64
    let random: SimRandom
    let scheduler: SimScheduler
    let traceLog: SimTrace
    let faults: SimFaults
    let events: SimTopic
    let requests: SimTopic
    let outcomes: SimTopic
    let tokens: SimTopic
    /// content-service's changelog: the memories its owners write every round (scheduled steps live there only).
    let changelog: SimTopic
    /// The steps the backend scheduled, by event id: when each is to be shown (``SimWorkload``).
    var stepTimes: [String: Date] = [:]
    /// The versions of each activity's step (a moved step has two), by activity id, oldest first.
    var stepVersions: [String: [String]] = [:]
    /// Activities whose end was applied while a step of theirs was still kept (it supersedes it).
    var stepsSupersededByEnd: Set<String> = []
    var dispatchers: SimGroup!
    var dispatcherInstances: [SimDispatcher] = []
    var contents: SimGroup!
    var contentInstances: [SimContent] = []
    var apns: SimAPNs!
    var phones: SimPhones!
    var registry: SimRegistry!
    private(set) var violations: [SimViolation] = []
    /// Events sent as assembled when an instance's API checked them (``SimContent/checkAhead(_:)``).
    var assembledAheadUsed = 0
    /// Every request written to the requests topic, by id (its copies share the id).
    private(set) var requestsById: [String: PushRequest] = [:]
    /// The ids of requests the backend's writer was told are persisted (acknowledged).
    var acknowledged: Set<String> = []
    /// Push-to-starts announced by a process killed before the start had its final outcome: their
    /// `failed` is the documented answer to a crash, not a lost start.
    private(set) var startsAtRisk: Set<String> = []
    /// Announcements standing, by request id: announcement id → the dispatcher that wrote it.
    private var announced: [String: [String: String]] = [:]

    var now: Date { scheduler.now }
    /// Spells when the outcomes topic cannot be read (its leaders unreachable from the dispatchers'
    /// readers, minutes at a time): every read of recent outcomes is cut short, however long it lasts.
    var outcomeOutages: [ClosedRange<Date>] = []
    var outcomesUnreadable: Bool { outcomeOutages.contains { $0.contains(now) } }

    init(seed: UInt64, partitions: Int) {
        self.seed = seed
        random = SimRandom(seed: seed)
        scheduler = SimScheduler(start: Self.start)
        traceLog = SimTrace(start: Self.start)
        faults = SimFaults.draw(random)
        events = SimTopic(name: Self.eventsTopic, partitions: partitions)
        requests = SimTopic(name: Self.requestsTopic, partitions: partitions)
        outcomes = SimTopic(name: "islet.push-outcomes.v1", partitions: partitions)
        tokens = SimTopic(name: "islet.tokens.v1", partitions: partitions)
        changelog = SimTopic(name: "islet.content-memory.v1", partitions: partitions)
    }

    func trace(_ line: @autoclosure () -> String) { traceLog.log(now, line()) }

    /// A member killed (kill -9): the group notices after the session timeout.
    func expireAfterSessionTimeout(_ memberId: String, in group: SimGroup) {
        scheduler.after(Self.sessionTimeout) { group.expire(memberId: memberId) }
    }

    func violate(_ invariant: String, _ detail: String) {
        trace("VIOLATION [\(invariant)] \(detail)")
        violations.append(SimViolation(invariant: invariant, detail: detail, at: now.timeIntervalSince(Self.start)))
    }

    // MARK: Writing to the cluster

    /// A record a service writes and waits for: tried until Kafka acknowledges it (a refusal is
    /// retried after a backoff; a lost acknowledgement stores it and is retried too: a copy), then
    /// `acknowledged`. Nothing happens once the writer's process is gone.
    func persist(_ value: SimValue, key: String, by writer: SimDispatcher, incarnation: Int, delay: Double = 0.1, acknowledged: @escaping () -> Void) {
        let latency = random.seconds(0.001, 0.02)
        let refused = random.chance(faults.produceRefused)
        let ackLost = !refused && random.chance(faults.produceAckLost)
        scheduler.after(latency) { [self] in
            guard writer.incarnation == incarnation, writer.isUp else { return }
            // Cut off from the cluster: the write times out, and is tried again.
            if refused || writer.phase == .stalled {
                scheduler.after(delay) { [self] in
                    self.persist(value, key: key, by: writer, incarnation: incarnation, delay: min(delay * 2, 5), acknowledged: acknowledged)
                }
                return
            }
            append(value, key: key, writer: writer.name)
            if ackLost {
                scheduler.after(delay) { [self] in
                    self.persist(value, key: key, by: writer, incarnation: incarnation, delay: min(delay * 2, 5), acknowledged: acknowledged)
                }
                return
            }
            acknowledged()
        }
    }

    /// Stores a record and lets its readers know.
    func append(_ value: SimValue, key: String, writer: String) {
        switch value {
        case .event(let event):
            let (partition, offset) = events.append(key, value, at: now)
            trace("kafka: event \(event.eventId) (\(event.kind.rawValue) #\(event.sequence) of \(event.activityId)) at \(partition)@\(offset)")
            for content in contentInstances { content.eventAppended(partition: partition) }
        case .request(let request):
            let (partition, offset) = requests.append(key, value, at: now)
            if requestsById[request.requestId] == nil { requestsById[request.requestId] = request }
            trace("kafka: request \(request.requestId.prefix(8)) (\(request.event.rawValue) #\(request.contentSequence) of \(key), t\(request.apnsTimestamp)) by \(writer) at \(partition)@\(offset)")
            for dispatcher in dispatcherInstances { dispatcher.requestAppended(partition: partition) }
            for content in contentInstances { content.requestAppended(request, partition: partition, offset: offset) }
        case .outcome(let outcome):
            let (partition, offset) = outcomes.append(key, value, at: now)
            trace("kafka: outcome \(outcome.result.rawValue) for \(outcome.requestId.prefix(8)) by \(writer) at \(partition)@\(offset)")
            registry?.outcomeAppended(outcome)
            for content in contentInstances { content.outcomeAppended(outcome, partition: partition, offset: offset) }
            switch outcome.result {
            case .sending: announced[outcome.requestId, default: [:]][outcome.announcementId ?? ""] = writer
            case .retrying: announced[outcome.requestId]?[outcome.announcementId ?? ""] = nil
            default: announced[outcome.requestId] = nil
            }
        case .token(let record):
            let (partition, offset) = tokens.append(key, value, at: now)
            trace("kafka: token \(record.state.rawValue) \(record.token.prefix(6)) for \(key) registered \(record.registeredAt.timeIntervalSince(Self.start)) at \(partition)@\(offset)")
            for dispatcher in dispatcherInstances { dispatcher.tokenAppended(partition: partition, offset: offset) }
            for content in contentInstances { content.tokenAppended(partition: partition, offset: offset) }
        case .memory(let record):
            let (partition, offset) = changelog.append(key, value, at: now)
            trace("kafka: memory of \(key) (\(record.map { "\($0.steps?.count ?? 0) steps" } ?? "tombstone")) by \(writer) at \(partition)@\(offset)")
        }
    }

    /// A request content-service hands to Kafka: stored and acknowledged (its position), refused
    /// (`nil`: not stored), or stored with its acknowledgement lost (`nil`: the writer sends it
    /// again, a copy on the topic). One writer's requests to one partition land in the order they
    /// were handed over (the idempotent producer keeps it), a stall holding those behind it.
    func produceRequest(_ request: PushRequest, by writer: String, _ done: @escaping (KafkaPosition?) -> Void) {
        let refused = random.chance(faults.produceRefused)
        let ackLost = !refused && random.chance(faults.produceAckLost)
        let latency = random.chance(faults.produceStalled) ? random.seconds(2, 12) : random.seconds(0.001, 0.03)
        let lane = "\(writer) \(requests.partition(ofKey: request.key ?? ""))"
        let landing = max(now.addingTimeInterval(latency), (producerLanes[lane] ?? .distantPast).addingTimeInterval(0.0001))
        producerLanes[lane] = landing
        scheduler.at(landing) { [self] in
            if refused {
                trace("\(writer): request \(request.requestId.prefix(8)) refused by Kafka")
                return done(nil)
            }
            append(.request(request), key: request.key ?? "", writer: writer)
            let partition = requests.partition(ofKey: request.key ?? "")
            if ackLost {
                trace("\(writer): request \(request.requestId.prefix(8)) stored, its acknowledgement lost")
                return done(nil)
            }
            acknowledged.insert(request.requestId)
            done(KafkaPosition(partition: partition, offset: requests.end(partition) - 1))
        }
    }

    /// Requests sent by a dispatcher whose outcome could not reach the topic before the partition
    /// moved on — in flight (or answered, the outcome not yet written) when the dispatcher lost its
    /// session, or when a revocation's or a stop's 8 s ran out: the next owner sends them again
    /// (the same content: a repeat on the phone, no second alert, no second activity) and the
    /// request may show a second outcome (docs/operations.md, what the contract does not cover).
    /// When the last request a writer handed over for a partition lands.
    private var producerLanes: [String: Date] = [:]

    private(set) var sentTwiceAllowed: Set<String> = []
    func inFlightAtLoss(_ requestId: String) { sentTwiceAllowed.insert(requestId) }
    func startAtRisk(_ requestId: String) { startsAtRisk.insert(requestId) }

    /// A process was killed (or lost its session cut off from the cluster): starts it announced
    /// that have no final outcome may get `failed` from the next owner, whatever APNs answered.
    func killed(_ dispatcher: SimDispatcher) {
        for (requestId, writers) in announced where writers.values.contains(dispatcher.name) { startsAtRisk.insert(requestId) }
    }

    /// The token record of `key` a reader of the tokens topic holds at `date` (the latest appended then).
    func tokenRecord(forKey key: String, asOf date: Date) -> TokenRecord? {
        let partition = tokens.partition(ofKey: key)
        for record in tokens.records(partition).reversed() where record.key == key && record.timestamp <= date {
            if case .token(let token) = record.value { return token }
        }
        return nil
    }

    // MARK: Invariants checked as the run goes

    /// Memory held stays under the configured limits.
    func checkHeld(_ dispatcher: SimDispatcher, machine: DispatchMachine) {
        let policy = dispatcher.policy
        // Room is checked at intake; requests waiting for a token are counted apart, and one
        // answered 429 or 5xx is put back in its queue whatever the queue holds.
        let waitingBound = policy.maximumQueued + policy.maximumAwaitingRequests + policy.maximumInFlight
        if machine.queued > waitingBound {
            violate("memory", "\(dispatcher.name) holds \(machine.queued) requests (limit \(waitingBound))")
        }
        // Counted from the queues themselves, not from the machine's own count of them.
        let waiting = machine.awaiting.keys.reduce(0) { $0 + (machine.slots[$1]?.queue.pending.count ?? 0) }
        if max(waiting, machine.awaitingRequests) > policy.maximumAwaitingRequests {
            violate("memory", "\(dispatcher.name) holds \(waiting) requests waiting for a token, counts \(machine.awaitingRequests) (limit \(policy.maximumAwaitingRequests))")
        }
    }

    // MARK: Invariants checked at the end

    /// Activities whose end ended `awaitingToken` while no active token of theirs was on the topic
    /// (the app had not registered it: its push-to-start was held by the device's budget, say), or
    /// `failed` because APNs refused every attempt of it (429, 5xx, GOAWAY, eight times), or shed
    /// by the limit of requests waiting for a token (``DispatcherPolicy/maximumAwaitingRequests``,
    /// a few in some seeds): nothing
    /// sends such an end again yet (docs/operations.md, what the contract does not cover).
    func endsGivenUp() -> Set<String> {
        let shedDetail = dispatcherInstances.first.map { "more than \($0.policy.maximumAwaitingRequests) requests wait for their token" }
        var given: Set<String> = []
        for partition in 0..<outcomes.partitionCount {
            for record in outcomes.records(partition) {
                guard case .outcome(let outcome) = record.value, let request = requestsById[outcome.requestId], request.event == .end,
                    let id = request.activityId, let key = request.key
                else { continue }
                // (A copy's end concerns the activity on its device.)
                let activityId = SimWorkload.shownId(id, deviceId: request.deviceId)
                if outcome.result == .failed, !apns.taken.contains(outcome.requestId) {
                    given.insert(activityId)
                    continue
                }
                // `tokenInvalid` when shed while it waited for a newer token than an invalid one.
                if outcome.result == .tokenInvalid, outcome.detail == shedDetail {
                    given.insert(activityId)
                    continue
                }
                guard outcome.result == .awaitingToken else { continue }
                // Shed by the limit of requests waiting for a token at once (drawn small in some seeds).
                if outcome.detail == shedDetail {
                    given.insert(activityId)
                    continue
                }
                // A token registered meanwhile should have been used: no excuse then.
                if tokenRecord(forKey: key, asOf: outcome.completedAt)?.state == .active { continue }
                given.insert(activityId)
            }
        }
        return given
    }

    func checkAtEnd() {
        // Nothing acknowledged to content-service is missing from the topic.
        for requestId in acknowledged.sorted() where requestsById[requestId] == nil {
            violate("nothing lost", "request \(requestId.prefix(8)) was acknowledged and is not on the topic")
        }
        // Once everything is done, nothing is held: no request, ticket, note or announcement left.
        for dispatcher in dispatcherInstances where dispatcher.phase == .running {
            let left = dispatcher.leftovers
            if !left.isEmpty { violate("memory", "\(dispatcher.name) still holds \(left.joined(separator: ", "))") }
        }
        // Every request has exactly one final outcome (written once: a copy of the same record,
        // written again after a lost acknowledgement, is the same outcome).
        var finals: [String: [PushOutcome]] = [:]
        for partition in 0..<outcomes.partitionCount {
            for record in outcomes.records(partition) {
                guard case .outcome(let outcome) = record.value, outcome.result.isFinal else { continue }
                if !(finals[outcome.requestId] ?? []).contains(outcome) { finals[outcome.requestId, default: []].append(outcome) }
            }
        }
        for (requestId, request) in requestsById.sorted(by: { $0.key < $1.key }) {
            let results = finals[requestId] ?? []
            let described = "request \(requestId.prefix(8)) (\(request.event.rawValue) of \(request.key ?? ""))"
            if results.isEmpty {
                violate("one outcome", "\(described) has no final outcome")
            } else if results.count > 1 {
                // Sent again by the next owner: this owner's outcome and the next owner's, no more.
                if !sentTwiceAllowed.contains(requestId) || results.count > 2 {
                    violate("one outcome", "\(described) has \(results.map(\.result.rawValue))")
                }
            }
        }
        // A push-to-start that APNs certainly never took is not given up as "answer unknown".
        for partition in 0..<outcomes.partitionCount {
            for record in outcomes.records(partition) {
                guard case .outcome(let outcome) = record.value, outcome.result == .failed, outcome.pushToStartKey != nil,
                    outcome.detail?.contains("answer is unknown") == true
                else { continue }
                if !apns.mayHaveDelivered(outcome.requestId) && !startsAtRisk.contains(outcome.requestId) {
                    violate("start lost", "push-to-start \(outcome.requestId.prefix(8)) failed as 'answer unknown', though APNs refused every attempt of it")
                }
            }
        }
        phones.checkAtEnd(endsGivenUp: endsGivenUp())
    }
}
