import Synchronization

/// Marks input records processed in offset order although their outcomes complete in any order:
/// a record's offset may be committed only once it and every earlier record of its partition are
/// done (their outcomes acknowledged by Kafka), or a crash would skip the unfinished ones.
public final class OffsetTracker: Sendable {
    private struct Track {
        /// Records begun, in offset order; `head` is the first not yet released.
        var records: [KafkaMessage] = []
        var done: [Bool] = []
        var head = 0
    }

    private let tracks = Mutex<[KafkaTopicPartition: Track]>([:])

    public init() {}

    /// A record was read and is now being worked on. Call in the order records are read.
    public func begin(_ message: KafkaMessage) {
        tracks.withLock { tracks in
            tracks[message.topicPartition, default: Track()].records.append(message)
            tracks[message.topicPartition, default: Track()].done.append(false)
        }
    }

    /// A record is done; returns the record to mark processed (the last of the run of done records
    /// at the front of its partition), or `nil` when an earlier one is still open.
    public func complete(_ message: KafkaMessage) -> KafkaMessage? {
        tracks.withLock { tracks -> KafkaMessage? in
            guard var track = tracks[message.topicPartition] else { return nil }
            // Offsets only grow within a track: binary search for the record.
            var low = track.head, high = track.records.count - 1
            var found: Int?
            while low <= high {
                let mid = (low + high) / 2
                let offset = track.records[mid].offset
                if offset == message.offset {
                    found = mid
                    break
                } else if offset < message.offset {
                    low = mid + 1
                } else {
                    high = mid - 1
                }
            }
            guard let index = found else { return nil }
            track.done[index] = true
            var release: KafkaMessage?
            while track.head < track.records.count, track.done[track.head] {
                release = track.records[track.head]
                track.head += 1
            }
            if track.head > 1_024, track.head * 2 > track.records.count {
                track.records.removeFirst(track.head)
                track.done.removeFirst(track.head)
                track.head = 0
            }
            tracks[message.topicPartition] = track
            return release
        }
    }

    /// Records of these partitions are no longer ours: forget them.
    public func revoke(_ partitions: [KafkaTopicPartition]) {
        tracks.withLock { tracks in
            for partition in partitions { tracks[partition] = nil }
        }
    }

    /// Records begun and not yet released, in all partitions.
    public var open: Int {
        tracks.withLock { $0.values.reduce(0) { $0 + $1.records.count - $1.head } }
    }
}
