import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// The Kafka side of content-service: reads `islet.activity-events.v1` in its consumer group,
/// turns each event into push requests (``ContentEngine``), sends them to
/// `islet.push-requests.v1` and marks the event processed only once they are acknowledged. An
/// event that does not decode, or does not fit its template, goes to the dead-letter topic with
/// the reason and the field; one that is a duplicate or out of order is counted and skipped.
///
/// Events are worked on in `workers` lanes at once, an activity's always in the same lane (by its
/// id, whatever key the backend gave the record), one after the other in the order read: the
/// activities of a lane waiting for an image, or simply busy, do not hold up the others, and the
/// work spreads over the machine's cores. Events are marked processed in offset order all the
/// same (``OffsetTracker``).
///
/// The freshness monitor, a changelog round and a restore take the whole service's turn
/// (``ServiceTurns``): what the monitor sends for an activity never interleaves with an event of
/// that activity.
public struct ContentServiceLoop<Consumer: GroupMessageSource>: Service {
    let consumer: Consumer
    let deadLetters: DeadLetterWriter
    let engine: ContentEngine
    let sender: RequestSender
    let thumbnails: ThumbnailService?
    /// Where a partition's memories are written when it is revoked.
    let changelog: ChangelogWriter?
    /// Where a partition's memories are read when it is assigned (`nil`: the engine's memory is
    /// kept by the caller).
    let memory: ContentMemoryLoader?
    let logger: Logger
    /// Events are marked processed in offset order, once their requests are acknowledged.
    private let tracker = OffsetTracker()
    /// How long a partition's revocation waits for its events under way.
    let revocationTimeout: Duration
    /// Lanes of events worked on at once.
    let workers: Int

    public init(
        consumer: Consumer, deadLetters: DeadLetterWriter, engine: ContentEngine, sender: RequestSender, thumbnails: ThumbnailService? = nil,
        changelog: ChangelogWriter? = nil, memory: ContentMemoryLoader? = nil, revocationTimeout: Duration = .seconds(8),
        workers: Int = ContentLanes.defaultWorkers, logger: Logger
    ) {
        precondition(workers > 0, "at least one lane")
        self.workers = workers
        self.changelog = changelog
        self.memory = memory
        self.revocationTimeout = revocationTimeout
        self.consumer = consumer
        self.deadLetters = deadLetters
        self.engine = engine
        self.sender = sender
        self.thumbnails = thumbnails
        self.logger = logger
    }

    public func run() async throws {
        // A partition moving to another instance (a rebalance, this one stopping): its events
        // still arriving are skipped, and those under way finish (their requests acknowledged
        // and the events marked) before its offsets are committed, so that the next owner does
        // none of them again.
        let (tracker, logger, changelog, memory) = (self.tracker, self.logger, self.changelog, self.memory)
        consumer.onRevocation(timeout: revocationTimeout + .seconds(4)) { [revocationTimeout] partitions in
            tracker.beginRevoking(partitions)
            let started = ContinuousClock.now
            // Events still queued in the lanes are left to the next owner: only those started are waited for.
            let finished = await tracker.waitUntilClosed(partitions, timeout: revocationTimeout) {
                tracker.abandonUnstarted(Set(partitions))
            }
            let metadata: Logger.Metadata = ["kafka.partitions": "\(partitions)", "took": "\(ContinuousClock.now - started)"]
            if finished {
                logger.info("partitions revoked: their events under way finished", metadata: metadata)
            } else {
                logger.warning("partitions revoked before their events under way finished: the next owner does those again", metadata: metadata)
            }
            // Their memories, while they are still this instance's (at most 3 s).
            await changelog?.revoked(Set(partitions.map(\.partition)), within: .seconds(3))
            // Kept until the next assignment, which usually gives them back.
            memory?.revoked(Set(partitions.map(\.partition)))
        }
        let lanes = (0..<workers).map { _ in AsyncStream<(ActivityEvent, OffsetTracker.Work)>.makeStream() }
        let queued = AsyncSemaphore(ContentLanes.queued)
        // The first error of a lane: the service stops (as it did when the one loop threw), reading
        // first; the lanes then leave what they still hold to the partitions' next owner.
        let failure = LaneFailure()
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await consumer.run() }
            try await withThrowingDiscardingTaskGroup { group in
                // Once reading ends (or fails), the events read go on to their requests; then the lanes end.
                defer { for lane in lanes { lane.continuation.finish() } }
                for lane in lanes {
                    group.addTask {
                        for await (activityEvent, work) in lane.stream {
                            defer { queued.release() }
                            // A lane failed: the service stops, the next owner does it.
                            guard failure.error == nil else {
                                tracker.abandon(work)
                                continue
                            }
                            do {
                                // Outside any turn: a lane waiting for an image holds up no one else.
                                let images = await images(for: activityEvent)
                                // Requests Kafka refused go again first, before anything that may follow them.
                                if sender.needsRepair { try await sender.turn { try await sender.repair() } }
                                try await sender.laneTurn {
                                    // Its partition was revoked, or is being revoked, while it waited: the next owner does it.
                                    guard tracker.start(work) else { return }
                                    try await handle(activityEvent, work, images: images)
                                }
                            } catch {
                                tracker.abandon(work)
                                failure.keep(error)
                                consumer.shutdown()
                            }
                        }
                    }
                }
                for try await event in consumer.decoded(as: ActivityEvent.self, deadLetters: deadLetters) {
                    switch event {
                    case .partitionsAssigned(let partitions):
                        // Their memories first (the changelog, then what came after its checkpoint),
                        // in the whole turn: their events wait in the consumer meanwhile, and neither
                        // the freshness monitor, a lane nor a changelog round looks at half-restored memories.
                        if let memory, try await sender.turn({ await memory.restore(Set(partitions.map(\.partition))) }) == nil { continue }
                        sender.own(partitions.map(\.partition))
                        engine.trackChanges(of: sender.ownedPartitions)
                    case .partitionsRevoked(let partitions):
                        sender.disown(partitions.map(\.partition))
                        engine.releaseTimestampFloors(partitions.map(\.partition))
                        tracker.revoke(partitions)
                        // Also when they were lost (the session expired), which calls no revocation handler.
                        memory?.revoked(Set(partitions.map(\.partition)))
                    case .message(let activityEvent, let raw):
                        // nil: its partition is being revoked; the next owner reads it.
                        guard let work = tracker.beginWork(raw) else { continue }
                        try await queued.acquire()
                        lanes[ContentLanes.lane(of: activityEvent.activityId, among: lanes.count)].continuation.yield((activityEvent, work))
                    case .deadLettered(let raw):
                        // Marked only once the events before it on its partition are done: up to
                        // 2,000 may still be in flight, and a commit past them would lose them in a crash.
                        guard let work = tracker.beginWork(raw) else { continue }
                        done(work)
                    default:
                        continue
                    }
                }
            }
            consumer.shutdown()
            if let error = failure.error { throw error }
        }
    }

    /// The first error of a lane.
    private final class LaneFailure: Sendable {
        private let first = Mutex<(any Error)?>(nil)
        var error: (any Error)? { first.withLock { $0 } }
        func keep(_ error: any Error) { first.withLock { $0 = $0 ?? error } }
    }

    private func done(_ work: OffsetTracker.Work) {
        if let release = tracker.complete(work) { consumer.markProcessed(release) }
    }

    /// Thumbnails of the images the activity has not had inline yet (cached; a failure means by URL only).
    private func images(for event: ActivityEvent) async -> [String: [String]] {
        guard let thumbnails else { return [:] }
        let inlined = (try? engine.activityKey(of: event)).flatMap(engine.memory(of:))?.inlinedImages ?? []
        let urls = engine.assembler.imageURLs(for: event).filter { !inlined.contains($0) }
        return urls.isEmpty ? [:] : await thumbnails.thumbnails(for: urls)
    }

    private func handle(_ event: ActivityEvent, _ work: OffsetTracker.Work, images: [String: [String]]) async throws {
        let raw = work.message
        Counter(label: "islet_content_events_in_total", dimensions: [("event", event.kind.rawValue)]).increment()
        let decision: ContentEngine.Decision
        do {
            decision = try engine.prepare(event, partition: raw.partition, images: images)
        } catch {
            Counter(label: "islet_content_events_total", dimensions: [("result", "refused")]).increment()
            logger.info("event refused", metadata: ["activity.id": "\(event.activityId)", "error": "\(error.description)"])
            try await deadLetters.send(raw, reason: .unprocessable, detail: error.description)
            done(work)
            return
        }
        switch decision {
        case .ignore(let why):
            Counter(label: "islet_content_events_total", dimensions: [("result", "ignored")]).increment()
            logger.debug("event ignored", metadata: ["activity.id": "\(event.activityId)", "event.why": "\(why)"])
            done(work)
        case .send(let prepared):
            Counter(label: "islet_content_events_total", dimensions: [("result", "sent")]).increment()
            if !prepared.shrinks.isEmpty { Counter(label: "islet_content_shrinks_total").increment() }
            // In flight: the next event goes on while Kafka acknowledges these.
            try await sender.enqueue(prepared) { done(work) }
        }
    }
}

/// The lanes ``ContentServiceLoop`` works on events in.
public enum ContentLanes {
    /// Events read and not yet worked on, in all lanes, at most (the reading then waits).
    static let queued = 512
    /// The default lanes: a few per core, so that lanes waiting for an image leave the cores busy.
    public static let defaultWorkers = max(4, 2 * ProcessInfo.processInfo.activeProcessorCount)

    /// The lane of an activity's events: the same for every event of its id (FNV-1a of the id).
    static func lane(of activityId: String, among lanes: Int) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in activityId.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Int(hash % UInt64(lanes))
    }
}

/// Sends prepared requests to `islet.push-requests.v1` and commits them to the engine's memory;
/// gives the event lanes and the freshness monitor their turns (``ServiceTurns``).
///
/// Requests are handed to librdkafka in order (an activity's, by its lane) and acknowledged in the
/// background (up to `window` events in flight); an event is done once all its requests are. A
/// request Kafka did not take is sent again, the same bytes, in the whole turn before a lane's next
/// event (``repair()``): its event stays open (unmarked) until then, so a crash cannot skip it.
public final class RequestSender: Sendable {
    let producer: any MessageSink
    let engine: ContentEngine
    let topic: String
    let logger: Logger
    /// Names this process as the writer of its push requests (a header on each), so that its
    /// memory replica need not decode them again (``ContentMemoryLoader``): the engine has their
    /// effect already. New with each process: after a restart every request is read back.
    public let writer: KafkaHeader = KafkaHeader(name: RequestSender.writerHeader, value: Array(UUID().uuidString.utf8))
    /// The header naming the content-service process that wrote a push request.
    public static let writerHeader = "islet-writer"
    /// The lanes' turns and the whole turn, in arrival order (a mutex cannot be held across an `await`).
    let turns = ServiceTurns()
    private let owned = Mutex<Set<Int32>>([])
    private let inFlight: AsyncSemaphore
    private let failed = Mutex<[(PushRequest, Completion)]>([])

    /// Counts down an event's requests; calls `onDone` at zero. Holds the event's place in the
    /// window until then, or until one of its requests fails: a request waiting to be sent again
    /// (in the whole turn) must not keep a lane that waits for a place from giving that turn.
    final class Completion: Sendable {
        private let state: Mutex<(remaining: Int, holdsPlace: Bool)>
        private let place: AsyncSemaphore
        private let onDone: @Sendable () -> Void
        init(count: Int, place: AsyncSemaphore, onDone: @escaping @Sendable () -> Void) {
            state = Mutex((count, true))
            self.place = place
            self.onDone = onDone
        }
        func one() {
            let (finished, release) = state.withLock { state in
                state.remaining -= 1
                let finished = state.remaining == 0
                let release = finished && state.holdsPlace
                if release { state.holdsPlace = false }
                return (finished, release)
            }
            if release { place.release() }
            if finished { onDone() }
        }
        /// One of its requests failed; it is to be sent again.
        func failed() {
            if state.withLock({ state in defer { state.holdsPlace = false }; return state.holdsPlace }) { place.release() }
        }
    }

    public init(
        producer: any MessageSink, engine: ContentEngine, topic: String = IsletTopics.pushRequests.name, window: Int = 2_000, logger: Logger
    ) {
        self.producer = producer
        self.engine = engine
        self.topic = topic
        self.inFlight = AsyncSemaphore(window)
        self.logger = logger
    }

    /// The activity-event partitions this instance owns.
    public var ownedPartitions: Set<Int32> { owned.withLock { $0 } }
    /// The event loop was assigned these partitions (a benchmark without a loop says so itself).
    public func own(_ partitions: [Int32]) { owned.withLock { $0.formUnion(partitions) } }
    public func disown(_ partitions: [Int32]) { owned.withLock { $0.subtract(partitions) } }

    /// Runs `body` when no other turn runs: no lane's, no other whole turn.
    func turn<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await turns.whole(body)
    }

    /// Runs `body` in a lane's turn: other lanes' may run at once, the whole turn may not.
    func laneTurn<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await turns.lane(body)
    }

    /// Requests Kafka refused wait to be sent again (``repair()``, in the whole turn).
    var needsRepair: Bool { failed.withLock { !$0.isEmpty } }

    /// Hands the requests to Kafka in order and moves the activity's memory on; `onPersisted` is
    /// called once every one is acknowledged.
    func enqueue(_ prepared: ContentEngine.Prepared, onPersisted: @escaping @Sendable () -> Void) async throws {
        let values = try prepared.requests.map { try IsletJSON.encode($0) }
        try await inFlight.acquire()
        let completion = Completion(count: prepared.requests.count, place: inFlight, onDone: onPersisted)
        // The memory moves on before the first acknowledgement can say where a request is stored.
        engine.commit(prepared)
        for (request, value) in zip(prepared.requests, values) {
            while true {
                do {
                    try producer.produce(topic: topic, key: request.key.map { Array($0.utf8) }, value: value, headers: [writer], partition: nil) { [self] result in
                        switch result {
                        case .success(let report):
                            if let position = report.position { engine.stored(request, at: position) }
                            completion.one()
                        case .failure:
                            self.failed.withLock { $0.append((request, completion)) }
                            completion.failed()
                        }
                    }
                    break
                } catch where error.isQueueFull {
                    await producer.waitForCapacity()
                } catch {
                    failed.withLock { $0.append((request, completion)) }
                    completion.failed()
                    break
                }
            }
            count(request)
        }
    }

    /// Waits, in a turn, until every request handed to Kafka is acknowledged: the engine's memory
    /// then counts nothing Kafka may still lose. `false` when that did not happen within `timeout`
    /// (Kafka slow or unreachable), or a request waits to be sent again (the next turn does that).
    func settle(within timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.milliseconds(1)
        while ContinuousClock.now < deadline {
            if failed.withLock({ !$0.isEmpty }) { return false }
            // A failed request gives its place back after it is listed: listed when the window is idle.
            if inFlight.isIdle { return failed.withLock { $0.isEmpty } }
            guard (try? await Task.sleep(for: pause)) != nil else { return false }
            pause = min(pause * 2, .milliseconds(50))
        }
        return false
    }

    /// Sends again, until Kafka takes them, the requests it refused (in the whole turn: a lane's
    /// next request of the same activity must not pass it).
    func repair() async throws {
        while let (request, completion) = failed.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
            if let position = try await sendUntilAcknowledged(request, activity: request.activityKey ?? request.key ?? "") {
                engine.stored(request, at: position)
            }
            completion.one()
        }
    }

    /// Where the request landed, when Kafka said.
    @discardableResult
    private func sendUntilAcknowledged(_ request: PushRequest, activity: String) async throws -> KafkaPosition? {
        var backoff = Duration.milliseconds(100)
        while true {
            do {
                let report = try await producer.send(request, to: topic, headers: [writer])
                return report.position
            } catch {
                logger.warning("push request not persisted; retrying", metadata: ["activity.key": "\(activity)", "error": "\(error)"])
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(5))
            }
        }
    }

    private func count(_ request: PushRequest) {
        Counter(label: "islet_content_requests_total", dimensions: [("event", request.event.rawValue), ("priority", "\(request.priority)")])
            .increment()
        Recorder(label: "islet_content_payload_bytes").record(request.payload.utf8.count)
    }
}

/// The freshness monitor (Lyft): every ``FreshnessPolicy/checkInterval``, looks at the live
/// activities of the partitions this instance owns, re-sends stale content, ends the severely stale
/// and the old, and reports the classes on /metrics.
public struct FreshnessMonitor: Service {
    let engine: ContentEngine
    let sender: RequestSender
    let logger: Logger
    /// The tokens of the activities the monitor ended, to invalidate in token-registry.
    let invalidations: TokenInvalidations
    /// Where the latest payloads the memory does not keep are read again.
    let payloads: RequestPayloads

    /// - Parameter invalidator: where an activity the monitor ended has its token invalidated
    ///   (`nil`: not configured; the token stays active until the app ends the activity).
    /// - Parameter payloads: where payloads the memory dropped (``RequestSender`` reports where
    ///   Kafka stored each request) are read again.
    public init(
        engine: ContentEngine, sender: RequestSender, logger: Logger, invalidator: (any ActivityInvalidating)? = nil, payloads: RequestPayloads
    ) {
        self.engine = engine
        self.sender = sender
        self.logger = logger
        self.payloads = payloads
        self.invalidations = TokenInvalidations(invalidator: invalidator, logger: logger)
    }

    public func run() async throws {
        while !Task.isCancelled {
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: engine.freshness.checkInterval) }) != nil else { return }
            try await check()
        }
    }

    /// One pass (tests call it with a manual clock).
    @discardableResult
    public func check() async throws -> [PushRequest] {
        var sent = try await pass()
        // Activities with something to send whose latest payload is on Kafka only: read, then
        // looked at again (outside the turn: events go on meanwhile).
        let wanted = engine.takePayloadsToRead()
        if !wanted.isEmpty {
            let read = await payloads.read(wanted)
            logger.info(
                "latest payloads read again from Kafka",
                metadata: ["payloads.wanted": "\(wanted.count)", "payloads.read": "\(read.found.count)", "payloads.lost": "\(read.lost.count)"])
            engine.restorePayloads(read.found, lost: read.lost)
            sent += try await pass()
        }
        // Once the end has its outcome: invalidated earlier, the dispatcher would not send the end.
        let (memory, now) = (self.engine, self.engine.clock.date)
        await invalidations.flush { item in
            memory.outcome(of: item.endRequestId, activityKey: MessageKey.activity(bundleId: item.bundleId, activityId: item.activityId)) != nil
                || now.timeIntervalSince(item.endSentAt) > TokenInvalidations.endWait
        }
        for (freshness, count) in engine.freshnessCounts() {
            Gauge(label: "islet_content_activities", dimensions: [("freshness", freshness.rawValue)]).record(count)
        }
        return sent
    }

    /// One sweep, in the loop's turn: its requests go to Kafka in order, as an event's do, and are
    /// acknowledged in the background (a request Kafka refuses is sent again before the next
    /// turn's work, ``RequestSender/repair()``). The turn is not held while Kafka acknowledges:
    /// a slow or stalled broker does not stop events behind hundreds of resends.
    private func pass() async throws -> [PushRequest] {
        try await sender.turn { () async throws -> [PushRequest] in
            try await sender.repair()
            var sent: [PushRequest] = []
            for prepared in engine.sweep(owned: sender.ownedPartitions) {
                // The token is invalidated once the end is on Kafka (and then answered, or 10 minutes old).
                let invalidation = prepared.invalidation.flatMap { reason in
                    prepared.requests.last.map { request in
                        TokenInvalidations.Item(
                            activityId: request.sourceActivityId ?? request.activityId ?? "", bundleId: request.app.bundleId, reason: reason,
                            endRequestId: request.requestId, endSentAt: request.createdAt)
                    }
                }
                try await sender.enqueue(prepared) { [invalidations] in
                    if let invalidation { invalidations.add(invalidation) }
                }
                for request in prepared.requests {
                    let action = request.event == .end ? "end" : "resend"
                    Counter(label: "islet_content_freshness_actions_total", dimensions: [("action", action)]).increment()
                    logger.info("freshness monitor", metadata: ["activity.key": "\(prepared.activityKey)", "action": "\(action)"])
                }
                sent += prepared.requests
            }
            return sent
        }
    }
}
