import Logging

/// What a service does as partitions of its input topic come and go, written once for every
/// service that keeps state per partition (apns-dispatcher, content-service), in the one order
/// that keeps each record's work done exactly once by one owner.
///
/// | transition | when | steps, in order |
/// | --- | --- | --- |
/// | assigned | the `partitionsAssigned` event, before any record of theirs | ``restore`` (their state read from Kafka), then ``own`` |
/// | being revoked | the consumer's revocation handler, before the group commits and moves them | ``stop`` (nothing new of theirs starts), ``finish`` (work under way ends, bounded), ``release`` (their state written for the next owner, bounded) |
/// | lost | the consumer's loss handler (the session expired: another member may own them already) | ``lost`` |
/// | revoked | the `partitionsRevoked` event (after a revocation or a loss) | ``forget`` |
///
/// The revocation handler's own bound is the two waits' plus a second: the group waits that long
/// at most before it commits what was marked.
public struct PartitionHandover: Sendable {
    /// Nothing new of these partitions starts: they are being revoked.
    public var stop: @Sendable ([KafkaTopicPartition]) -> Void
    /// Waits at most the given time for their work under way; whether it all finished.
    public var finish: @Sendable ([KafkaTopicPartition], Duration) async -> Bool
    /// Writes what the next owner reads of them (a changelog round), at most the given time.
    public var release: @Sendable (Set<Int32>, Duration) async -> Void
    /// They are gone without a revocation (the session was lost): their work stops at once.
    public var lost: (@Sendable ([KafkaTopicPartition]) -> Void)?
    /// Reads their state before their first record is handled; `false`: not restored (the
    /// service is stopping), and they are not taken.
    public var restore: @Sendable ([KafkaTopicPartition]) async throws -> Bool
    /// Their records are this instance's to handle from now on.
    public var own: @Sendable ([KafkaTopicPartition]) -> Void
    /// Everything of theirs is dropped (the revoked event, after a revocation or a loss).
    public var forget: @Sendable ([KafkaTopicPartition]) -> Void

    /// How long the revocation waits for the work under way, and for the release.
    public var finishTimeout: Duration
    public var releaseTimeout: Duration
    /// What "the work under way" is called in the log ("pushes in flight", "events under way"),
    /// what the log adds when it finished, and what happens to it when it did not.
    public var work: String
    public var finishedNote: String
    public var unfinishedNote: String

    public init(
        work: String, finishedNote: String = "", unfinishedNote: String = "the next owner does those again", finishTimeout: Duration,
        releaseTimeout: Duration,
        stop: @escaping @Sendable ([KafkaTopicPartition]) -> Void,
        finish: @escaping @Sendable ([KafkaTopicPartition], Duration) async -> Bool,
        release: @escaping @Sendable (Set<Int32>, Duration) async -> Void,
        lost: (@Sendable ([KafkaTopicPartition]) -> Void)? = nil,
        restore: @escaping @Sendable ([KafkaTopicPartition]) async throws -> Bool,
        own: @escaping @Sendable ([KafkaTopicPartition]) -> Void,
        forget: @escaping @Sendable ([KafkaTopicPartition]) -> Void
    ) {
        self.work = work
        self.finishedNote = finishedNote
        self.unfinishedNote = unfinishedNote
        self.finishTimeout = finishTimeout
        self.releaseTimeout = releaseTimeout
        self.stop = stop
        self.finish = finish
        self.release = release
        self.lost = lost
        self.restore = restore
        self.own = own
        self.forget = forget
    }

    /// The revocation handler's bound: both waits, and a second for the rest.
    public var revocationTimeout: Duration { finishTimeout + releaseTimeout + .seconds(1) }

    /// Installs the revocation and loss handlers on `consumer` (before it runs).
    public func install(on consumer: some GroupMessageSource, logger: Logger) {
        consumer.onRevocation(timeout: revocationTimeout) { partitions in
            await self.revoking(partitions, logger: logger)
        }
        if let lost { consumer.onLoss(lost) }
    }

    /// The revocation handler's steps: stop, finish (bounded), release (bounded).
    func revoking(_ partitions: [KafkaTopicPartition], logger: Logger) async {
        stop(partitions)
        let started = ContinuousClock.now
        let finished = await finish(partitions, finishTimeout)
        let metadata: Logger.Metadata = ["kafka.partitions": "\(partitions)", "took": "\(ContinuousClock.now - started)"]
        if finished {
            logger.info("partitions revoked: their \(work) finished\(finishedNote)", metadata: metadata)
        } else {
            logger.warning("partitions revoked before their \(work) finished: \(unfinishedNote)", metadata: metadata)
        }
        await release(Set(partitions.map(\.partition)), releaseTimeout)
    }

    /// The `partitionsAssigned` event: restore, then own. Whether they were taken.
    public func assigned(_ partitions: [KafkaTopicPartition]) async throws -> Bool {
        guard try await restore(partitions) else { return false }
        own(partitions)
        return true
    }

    /// The `partitionsRevoked` event.
    public func revoked(_ partitions: [KafkaTopicPartition]) {
        forget(partitions)
    }
}
