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
    let changelog: ContentChangelog?
    /// Where a partition's memories are read when it is assigned (`nil`: the engine's memory is
    /// kept by the caller).
    let memory: ContentMemoryLoader?
    let logger: Logger
    /// Events are marked processed in offset order, once their requests are acknowledged.
    private let tracker = OffsetTracker()
    /// The sender's: one set of metrics for the service.
    private var metrics: ContentMetrics { sender.metrics }
    /// How long a partition's revocation waits for its events under way.
    let revocationTimeout: Duration
    /// Lanes of events worked on at once.
    let workers: Int

    public init(
        consumer: Consumer, deadLetters: DeadLetterWriter, engine: ContentEngine, sender: RequestSender, thumbnails: ThumbnailService? = nil,
        changelog: ContentChangelog? = nil, memory: ContentMemoryLoader? = nil, revocationTimeout: Duration = .seconds(8),
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
        let handover = self.handover
        handover.install(on: consumer, logger: logger)
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
                    group.addTask { await work(on: lane.stream, queued: queued, failure: failure) }
                }
                for try await event in consumer.decoded(as: ActivityEvent.self, deadLetters: deadLetters) {
                    switch event {
                    case .partitionsAssigned(let partitions):
                        _ = try await handover.assigned(partitions)
                    case .partitionsRevoked(let partitions):
                        handover.revoked(partitions)
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

    /// What this service does as partitions come and go (``PartitionHandover``). A partition
    /// moving to another instance (a rebalance, this one stopping): its events still arriving are
    /// skipped, and those under way finish (their requests acknowledged and the events marked)
    /// before its offsets are committed, so that the next owner does none of them again; then its
    /// memories are written while it is still this instance's (at most 3 s), and kept until the
    /// next assignment, which usually gives them back. A partition assigned: its memories first
    /// (the changelog, then what came after its checkpoint), in the whole turn: its events wait in
    /// the consumer meanwhile, and neither the freshness monitor, a lane nor a changelog round
    /// looks at half-restored memories.
    var handover: PartitionHandover {
        let (tracker, changelog, memory, sender, engine) = (self.tracker, self.changelog, self.memory, self.sender, self.engine)
        return PartitionHandover(
            work: "events under way", finishTimeout: revocationTimeout, releaseTimeout: .seconds(3),
            stop: { partitions in
                tracker.beginRevoking(partitions)
                // Events that scheduled a step and wait for a round are left to the next owner.
                changelog?.source.abandonAwaiting(Set(partitions.map(\.partition)))
            },
            finish: { partitions, timeout in
                // Events still queued in the lanes are left to the next owner: only those started are waited for.
                await tracker.waitUntilClosed(partitions, timeout: timeout) { tracker.abandonUnstarted(Set(partitions)) }
            },
            release: { partitions, timeout in
                await changelog?.revoked(partitions, within: timeout)
                memory?.revoked(partitions)
            },
            restore: { partitions in
                guard let memory else { return true }
                return try await sender.turn({ await memory.restore(Set(partitions.map(\.partition))) }) != nil
            },
            own: { partitions in
                changelog?.source.reopen(Set(partitions.map(\.partition)))
                sender.own(partitions.map(\.partition))
                engine.trackChanges(of: sender.ownedPartitions)
            },
            forget: { partitions in
                sender.disown(partitions.map(\.partition))
                engine.releaseTimestampFloors(partitions.map(\.partition))
                tracker.revoke(partitions)
                // Also when they were lost (the session expired), which calls no revocation handler.
                memory?.revoked(Set(partitions.map(\.partition)))
                changelog?.source.abandonAwaiting(Set(partitions.map(\.partition)))
            })
    }

    /// One lane: its events one after the other, each in the lane's turn once its images are in.
    private func work(on lane: AsyncStream<(ActivityEvent, OffsetTracker.Work)>, queued: AsyncSemaphore, failure: LaneFailure) async {
        for await (activityEvent, work) in lane {
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
        metrics.eventIn(event.kind)
        let decision: ContentEngine.Decision
        do {
            decision = try engine.prepare(event, partition: raw.partition, images: images)
        } catch {
            metrics.eventRefused()
            logger.info("event refused", metadata: ["activity.id": "\(event.activityId)", "error": "\(error.description)"])
            try await deadLetters.send(raw, reason: .unprocessable, detail: error.description)
            done(work)
            return
        }
        switch decision {
        case .ignore(let why):
            metrics.eventIgnored()
            logger.debug("event ignored", metadata: ["activity.id": "\(event.activityId)", "event.why": "\(why)"])
            done(work)
        case .schedule(let scheduled):
            metrics.eventScheduled()
            logger.debug("event scheduled", metadata: ["activity.id": "\(event.activityId)", "event.at": "\(event.at.map { "\($0)" } ?? "")"])
            engine.commit(scheduled)
            // Processed once the changelog holds the step: a crash before that reads the event again.
            if let changelog {
                changelog.source.afterNextRound(partition: raw.partition, done: { done(work) }, abandon: { tracker.abandon(work) })
            } else {
                done(work)
            }
        case .send(let prepared):
            metrics.eventSent(shrunk: !prepared.shrinks.isEmpty)
            // In flight: the next event goes on while Kafka acknowledges these.
            try await sender.enqueue(prepared) { done(work) }
        }
    }
}
