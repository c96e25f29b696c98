import Synchronization

/// Marks input records processed in offset order although their outcomes complete in any order:
/// a record's offset may be committed only once it and every earlier record of its partition are
/// done (their outcomes acknowledged by Kafka), or a crash would skip the unfinished ones.
public final class OffsetTracker: Sendable {
    private struct Track {
        enum Status { case open, done, abandoned }
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
        var hasOpen: Bool { status[head...].contains(.open) }
    }

    private struct State {
        var tracks: [KafkaTopicPartition: Track] = [:]
        /// Partitions being revoked: no new record of theirs is begun (``beginRevoking(_:)``).
        var revoking: Set<KafkaTopicPartition> = []
    }

    private let state = Mutex(State())

    public init() {}

    /// A record was read and is now being worked on. Call in the order records are read. Returns
    /// `false`, and begins nothing, when its partition is being revoked: the caller skips the
    /// record (the partition's next owner reads it).
    @discardableResult
    public func begin(_ message: KafkaMessage) -> Bool {
        state.withLock { state in
            guard !state.revoking.contains(message.topicPartition) else { return false }
            state.tracks[message.topicPartition, default: Track()].records.append(message)
            state.tracks[message.topicPartition, default: Track()].status.append(.open)
            return true
        }
    }

    /// These partitions are about to be revoked (``KafkaConsumer/onRevocation(timeout:_:)``): their
    /// records still arriving are not begun; those begun may still complete, and
    /// ``isOpen(in:)`` says whether any is left. Ends with ``revoke(_:)``.
    public func beginRevoking(_ partitions: [KafkaTopicPartition]) {
        state.withLock { $0.revoking.formUnion(partitions) }
    }

    /// Whether this record was begun, is not done or abandoned, and its partition is neither
    /// being revoked nor revoked: work that waited to start is still wanted.
    public func isOpen(_ message: KafkaMessage) -> Bool {
        state.withLock { state in
            guard !state.revoking.contains(message.topicPartition), let track = state.tracks[message.topicPartition],
                let index = track.index(of: message.offset)
            else { return false }
            return track.status[index] == .open
        }
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
        state.withLock { state -> KafkaMessage? in
            guard var track = state.tracks[message.topicPartition], let index = track.index(of: message.offset) else { return nil }
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
            state.tracks[message.topicPartition] = track
            return release
        }
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
        state.withLock { state in
            guard var track = state.tracks[message.topicPartition], let index = track.index(of: message.offset) else { return }
            track.status[index] = .abandoned
            state.tracks[message.topicPartition] = track
        }
    }

    /// Records begun and not yet released, in all partitions.
    public var open: Int {
        state.withLock { $0.tracks.values.reduce(0) { $0 + $1.records.count - $1.head } }
    }
}
