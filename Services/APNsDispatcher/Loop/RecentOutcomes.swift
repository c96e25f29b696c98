import Foundation
import IsletKafka
import IsletMessages
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

/// Reads the recent outcomes of some partitions of `islet.push-outcomes.v1`: the request ids that
/// already have their final outcome.
public struct RecentOutcomes: Sendable {
    /// Makes the replica that reads these partitions of the outcomes topic from the first record
    /// at or after `since` (`nil`: from their start).
    public typealias MakeReader = @Sendable (_ partitions: [Int32], _ since: Date?) throws -> any MessageSource

    let makeReader: MakeReader
    let window: Duration
    /// The time the window and the records' Kafka timestamps are measured against: the host's.
    let clock: any WallClock
    let logger: Logger

    /// Reads `topic` of the cluster at `bootstrapServers`.
    public init(bootstrapServers: String, topic: String, window: Duration = .seconds(3_600), settings: [String: String] = [:], logger: Logger) {
        self.init(window: window, logger: logger) { partitions, since in
            try KafkaConsumer(
                configuration: .replica(
                    bootstrapServers: bootstrapServers, topics: [topic], partitions: partitions, since: since, clientID: "apns-dispatcher.outcomes",
                    settings: settings),
                logger: logger)
        }
    }

    /// Reads what `makeReader`'s replicas read (a ``MemoryBus``'s in tests).
    public init(window: Duration = .seconds(3_600), clock: any WallClock = SystemWallClock(), logger: Logger, makeReader: @escaping MakeReader) {
        self.makeReader = makeReader
        self.clock = clock
        self.window = window
        self.logger = logger
    }

    /// The newest content sent to an activity, as the outcomes of attempts that may have reached
    /// the phone tell it, and the newest `aps.timestamp` they carried (`nil` if none said: outcomes
    /// written before they carried it).
    public struct Floor: Sendable, Equatable {
        public var sequence: Int64
        public var requestId: String
        public var timestamp: Int64?

        public init(sequence: Int64, requestId: String, timestamp: Int64? = nil) {
            (self.sequence, self.requestId, self.timestamp) = (sequence, requestId, timestamp)
        }
    }

    /// What the partitions' recent outcomes say.
    public struct Ids: Sendable {
        /// With a final outcome: not sent again.
        public var finished: Set<String> = []
        /// Announcements (``PushResult/sending``, by announcement id) not taken back by a
        /// ``PushResult/retrying`` naming them, of requests without a final outcome: an attempt may
        /// have reached the phone (a push-to-start announced and not answered before a crash, an
        /// alerting push whose attempt went unanswered).
        public var announcements: [String: Set<String>] = [:]
        /// The newest content sent to each activity (`<bundleId>/<activityId>`), as the outcomes of
        /// attempts that may have reached the phone tell it.
        public var floors: [String: Floor] = [:]

        public init() {}

        /// The requests an attempt of which may have reached the phone.
        public var maybeDelivered: Set<String> { Set(announcements.keys) }

        /// Takes in an outcome read from the topic, in the topic's order.
        public mutating func add(_ outcome: PushOutcome) {
            // content-service's later verdict on a start it already has the final outcome of.
            guard outcome.result != .startUnconfirmed else { return }
            let requestId = outcome.requestId
            if outcome.result.isFinal {
                finished.insert(requestId)
                announcements[requestId] = nil
            } else if !finished.contains(requestId) {
                // A record from before announcements had ids stands for (or takes back) all of them.
                if outcome.result == .sending {
                    announcements[requestId, default: []].insert(outcome.announcementId ?? "")
                } else if let taken = outcome.announcementId {
                    announcements[requestId]?.remove(taken)
                    if announcements[requestId]?.isEmpty == true { announcements[requestId] = nil }
                } else {
                    announcements[requestId] = nil
                }
            }
            let reached = outcome.result == .delivered || outcome.result == .deliveredDowngraded || outcome.result == .sending
                || (outcome.result == .failed && outcome.attempts > 0)
            // (A widget push's sequence is its activity's, not the widget key's: no floor.)
            if reached, outcome.pushToStartKey == nil, outcome.widgetKey == nil, let key = outcome.key, let sequence = outcome.contentSequence {
                var floor = floors[key] ?? Floor(sequence: sequence, requestId: requestId)
                if sequence > floor.sequence { (floor.sequence, floor.requestId) = (sequence, requestId) }
                if let timestamp = outcome.apnsTimestamp { floor.timestamp = max(floor.timestamp ?? timestamp, timestamp) }
                floors[key] = floor
            }
        }
    }

    /// How much earlier than the first request read again the outcomes read start: a request
    /// content-service wrote twice (a send it retried after a timeout, the same request id) may
    /// come minutes after the first copy, and the clocks of the two services' hosts may differ.
    static let clockMargin: TimeInterval = 600

    /// What the outcomes written to `partition` since the partition's first request read again
    /// was (`firstRequestAt`, its Kafka timestamp in milliseconds, less ``clockMargin``), and at
    /// most `window` ago, say. A read cut short (the cluster stopped answering) is done again, with
    /// a backoff, for as long as it takes: handling the requests with part of the outcomes would
    /// send some of them twice, push-to-starts too. `nil` once `wanted` says the partition is no
    /// longer this instance's (or the task is cancelled): its next owner reads them.
    func requestIds(partition: Int32, firstRequestAt: Int64?, while wanted: () -> Bool = { true }) async -> Ids? {
        let since = Self.since(window: window, firstRequestAt: firstRequestAt, now: clock.date)
        return await Self.read(
            partition: partition, logger: logger, wanted: { !Task.isCancelled && wanted() },
            pause: { try? await Task.sleep(for: $0) }, { await requestIds(partitions: [partition], since: since) })
    }

    /// `read` until it reads everything (`nil`: cut short), pausing between reads as ``Rereads``
    /// says, while `wanted`; `nil` once not wanted.
    static func read(
        partition: Int32, logger: Logger, wanted: () -> Bool, pause: (Duration) async -> Void, _ read: () async -> Ids?
    ) async -> Ids? {
        var rereads = Rereads()
        while true {
            if let ids = await read() { return ids }
            guard let wait = rereads.cutShort(stillWanted: wanted()) else { return nil }
            let metadata: Logger.Metadata = ["kafka.partition": "\(partition)", "backoff": "\(wait)", "tries": "\(rereads.tries)"]
            if rereads.tries % 10 == 0 {
                logger.error("recent outcomes still not read: the partition's requests wait for them", metadata: metadata)
            } else {
                logger.warning("recent outcomes not read completely; reading them again", metadata: metadata)
            }
            await pause(wait)
        }
    }

    /// When a read of a partition's recent outcomes cut short is done again: after a pause that
    /// doubles from 1 s to 10 s, for as long as the partition is this instance's. Never "long
    /// enough to go on without them": the requests read again would be sent again, push-to-starts
    /// too (the simulation's outages of the outcomes topic check it).
    struct Rereads: Sendable {
        static let firstPause = Duration.seconds(1)
        static let longestPause = Duration.seconds(10)
        /// Reads cut short so far.
        private(set) var tries = 0
        private var pause = firstPause

        /// After a read cut short: the pause before the next, or `nil` when there is no next (the
        /// partition is no longer this instance's, or the service is stopping).
        mutating func cutShort(stillWanted: Bool) -> Duration? {
            tries += 1
            guard stillWanted else { return nil }
            defer { pause = min(pause * 2, Self.longestPause) }
            return pause
        }
    }

    /// Where the read of outcomes starts: `window` ago, or later when the first request read again
    /// is younger (less ``clockMargin``).
    static func since(window: Duration, firstRequestAt: Int64?, now: Date) -> Date {
        let oldest = now.addingTimeInterval(-(window / .seconds(1)))
        guard let firstRequestAt else { return oldest }
        return max(oldest, Date(timeIntervalSince1970: Double(firstRequestAt) / 1_000 - clockMargin))
    }

    /// The partitions' outcomes since `since` (the whole partitions when a read by time fails);
    /// `nil` when they could not be read completely.
    func requestIds(partitions: [Int32], since: Date) async -> Ids? {
        guard !partitions.isEmpty else { return Ids() }
        do {
            return try await read(partitions: partitions, since: since)
        } catch {
            logger.warning("recent outcomes by time unavailable; reading the partitions whole", metadata: ["error": "\(error)"])
            return try? await read(partitions: partitions, since: nil)
        }
    }

    /// `nil`: cut short after 30 s (a partition never reported its end).
    private func read(partitions: [Int32], since: Date?) async throws -> Ids? {
        let reader = try makeReader(partitions, since)
        let wanted = Set(partitions)
        let (ids, complete) = try await reader.reading(atMost: .seconds(30)) { reader -> (Ids, Bool) in
            var ids = Ids()
            var ended: Set<Int32> = []
            for await event in reader.events {
                switch event {
                case .message(let message):
                    guard let value = message.value, let outcome = try? IsletJSON.decode(PushOutcome.self, from: value) else { break }
                    ids.add(outcome)
                case .partitionEnd(let partition):
                    ended.insert(partition.partition)
                    if ended == wanted { return (ids, true) }
                default:
                    break
                }
            }
            return (ids, false)
        }
        // A partition that never reports its end must not hold the assignment for ever.
        if !complete { logger.warning("recent outcomes: reading cut short after 30 s") }
        return complete ? ids : nil
    }
}
