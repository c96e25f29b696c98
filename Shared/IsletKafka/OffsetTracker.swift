import Synchronization

/// Marks input records processed in offset order although their outcomes complete in any order:
/// a record's offset may be committed only once it and every earlier record of its partition are
/// done (their outcomes acknowledged by Kafka), or a crash would skip the unfinished ones.
public final class OffsetTracker: Sendable {
    private struct Track {
        /// `started`: begun and being worked on (``start(_:)``); `open`: begun, not started.
        enum Status { case open, started, done, abandoned }
        /// Which assignment of the partition the track is of (a partition revoked and assigned
        /// again reads its records again, at the same offsets).
        let generation: UInt64
        /// Records begun, in offset order; `head` is the first not yet released.
        var records: [KafkaMessage] = []
        var status: [Status] = []
        var head = 0

        /// Where the record at `offset` is (offsets only grow within a track: a binary search).
        func index(of offset: Int64) -> Int? {
            var low = head, high = records.count - 1
            while low <= high {
                let mid = (low + high) / 2
                let found = records[mid].offset
                if found == offset { return mid }
                if found < offset { low = mid + 1 } else { high = mid - 1 }
            }
            return nil
        }

        /// Records begun, not done and not abandoned.
        var hasOpen: Bool { status[head...].contains { $0 == .open || $0 == .started } }
    }

    /// A record begun, of one assignment of its partition (``beginWork(_:)``): a record read
    /// again after the partition was revoked and assigned back is other work, at the same offset.
    public struct Work: Sendable {
        public let message: KafkaMessage
        let generation: UInt64
    }

    private struct State {
        var tracks: [KafkaTopicPartition: Track] = [:]
        /// Partitions being revoked: no new record of theirs is begun (``beginRevoking(_:)``).
        var revoking: Set<KafkaTopicPartition> = []
        var lastGeneration: UInt64 = 0

        /// Runs `body` on the track of `partition` where it is stored (a copy taken out of the
        /// dictionary would copy its arrays on the first change), when there is one and, given a
        /// generation, it is of that assignment.
        mutating func update<Result>(
            _ partition: KafkaTopicPartition, generation: UInt64? = nil, _ body: (inout Track) -> Result?
        ) -> Result? {
            guard let stored = tracks[partition]?.generation, generation.map({ $0 == stored }) ?? true else { return nil }
            return body(&tracks[partition]!)
        }
    }

    private let state = Mutex(State())

    public init() {}

    /// A record was read and is now being worked on. Call in the order records are read. Returns
    /// `false`, and begins nothing, when its partition is being revoked: the caller skips the
    /// record (the partition's next owner reads it).
    @discardableResult
    public func begin(_ message: KafkaMessage) -> Bool {
        beginWork(message) != nil
    }

    /// ``begin(_:)``, returning the work to ``start(_:)``, ``complete(_:)`` or ``abandon(_:)``.
    public func beginWork(_ message: KafkaMessage) -> Work? {
        state.withLock { state in
            guard !state.revoking.contains(message.topicPartition) else { return nil }
            if state.tracks[message.topicPartition] == nil {
                state.lastGeneration += 1
                state.tracks[message.topicPartition] = Track(generation: state.lastGeneration)
            }
            return state.update(message.topicPartition) { track in
                track.records.append(message)
                track.status.append(.open)
                return Work(message: message, generation: track.generation)
            }
        }
    }

    /// Work begun and waiting is now done: `true` when it is still wanted (open, of its
    /// partition's current assignment, which is not being revoked), and then it counts as started:
    /// ``abandonUnstarted(_:)`` no longer drops it.
    public func start(_ work: Work) -> Bool {
        state.withLock { state in
            guard !state.revoking.contains(work.message.topicPartition) else { return false }
            return state.update(work.message.topicPartition, generation: work.generation) { track -> Bool? in
                guard let index = track.index(of: work.message.offset), track.status[index] == .open else { return nil }
                track.status[index] = .started
                return true
            } ?? false
        }
    }

    /// Records of these partitions begun and not started are dropped (``abandon(_:)``): a
    /// revocation need not wait for work queued behind others.
    public func abandonUnstarted(_ partitions: Set<KafkaTopicPartition>) {
        state.withLock { state in
            for partition in partitions {
                state.update(partition) { track -> Void? in
                    for index in track.head..<track.status.count where track.status[index] == .open { track.status[index] = .abandoned }
                    return nil
                }
            }
        }
    }

    /// These partitions are about to be revoked (``KafkaConsumer/onRevocation(timeout:_:)``): their
    /// records still arriving are not begun; those begun may still complete, and
    /// ``isOpen(in:)`` says whether any is left. Ends with ``revoke(_:)``.
    public func beginRevoking(_ partitions: [KafkaTopicPartition]) {
        state.withLock { $0.revoking.formUnion(partitions) }
    }

    /// Whether any record of these partitions was begun and is not yet released.
    public func isOpen(in partitions: Set<KafkaTopicPartition>) -> Bool {
        state.withLock { state in
            partitions.contains { partition in state.tracks[partition]?.hasOpen ?? false }
        }
    }

    /// Waits (polling every `interval`) until no record of these partitions is open, at most
    /// `timeout`; `meanwhile` runs before every check (to drop work that has not started).
    /// Returns whether none is open.
    public func waitUntilClosed(
        _ partitions: [KafkaTopicPartition], timeout: Duration, interval: Duration = .milliseconds(10),
        meanwhile: () async -> Void = {}
    ) async -> Bool {
        let set = Set(partitions)
        let deadline = ContinuousClock.now + timeout
        while true {
            await meanwhile()
            if !isOpen(in: set) { return true }
            guard ContinuousClock.now < deadline, (try? await Task.sleep(for: interval)) != nil else { return false }
        }
    }

    /// A record is done; returns the record to mark processed (the last of the run of done records
    /// at the front of its partition), or `nil` when an earlier one is still open.
    public func complete(_ message: KafkaMessage) -> KafkaMessage? {
        state.withLock { state in
            state.update(message.topicPartition) { track in Self.complete(message, in: &track, unlessAbandoned: false) }
        }
    }

    /// ``complete(_:)`` for work of one assignment: nothing when its partition was revoked (and
    /// perhaps assigned back) since it began, or the work was abandoned.
    public func complete(_ work: Work) -> KafkaMessage? {
        state.withLock { state in
            state.update(work.message.topicPartition, generation: work.generation) { track in
                Self.complete(work.message, in: &track, unlessAbandoned: true)
            }
        }
    }

    private static func complete(_ message: KafkaMessage, in track: inout Track, unlessAbandoned: Bool) -> KafkaMessage? {
        guard let index = track.index(of: message.offset), !unlessAbandoned || track.status[index] != .abandoned else { return nil }
        track.status[index] = .done
        var release: KafkaMessage?
        while track.head < track.records.count, track.status[track.head] == .done {
            release = track.records[track.head]
            track.head += 1
        }
        if track.head > 1_024, track.head * 2 > track.records.count {
            track.records.removeFirst(track.head)
            track.status.removeFirst(track.head)
            track.head = 0
        }
        return release
    }

    /// Records of these partitions are no longer ours: forget them.
    public func revoke(_ partitions: [KafkaTopicPartition]) {
        state.withLock { state in
            for partition in partitions {
                state.tracks[partition] = nil
                state.revoking.remove(partition)
            }
        }
    }

    /// One record begun will never be completed (its partition is being revoked and its work was
    /// dropped before it started): ``isOpen(in:)`` no longer counts for it, and nothing at or after
    /// it is released (its partition's next owner does it).
    public func abandon(_ message: KafkaMessage) {
        state.withLock { state in _ = state.update(message.topicPartition) { track in Self.abandon(message, in: &track) } }
    }

    /// ``abandon(_:)`` for work of one assignment: nothing when its partition was revoked since it began.
    public func abandon(_ work: Work) {
        state.withLock { state in
            _ = state.update(work.message.topicPartition, generation: work.generation) { track in Self.abandon(work.message, in: &track) }
        }
    }

    private static func abandon(_ message: KafkaMessage, in track: inout Track) -> Void? {
        guard let index = track.index(of: message.offset), track.status[index] != .done else { return nil }
        track.status[index] = .abandoned
        return nil
    }

    /// Records begun and not yet released, in all partitions.
    public var open: Int {
        state.withLock { $0.tracks.values.reduce(0) { $0 + $1.records.count - $1.head } }
    }
}
