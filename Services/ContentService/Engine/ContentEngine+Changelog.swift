import Foundation
import IsletKafka
import HeapModule
import IsletMessages
import IsletTokens
import Synchronization

/// The engine's side of the changelog (``ContentChanges``): what changed, taken and handed back; memories restored and forgotten.
extension ContentEngine {
    /// An activity's memory to write to the changelog (`nil`: forgotten, a tombstone).
    public struct Unwritten: Sendable {
        public var partition: Int32
        public var activityKey: String
        public var memory: ActivityMemory?
    }

    /// Takes the memories of `partitions` that changed since they were last taken: write them to
    /// the changelog, or hand them back (``unwrittenAgain(_:)``) when that fails.
    public func takeUnwritten(partitions: Set<Int32>) -> [Unwritten] {
        state.withLock { state in
            var taken: [Unwritten] = []
            for (partition, keys) in state.unwritten.take(partitions: partitions) {
                for key in keys { taken.append(Unwritten(partition: partition, activityKey: key, memory: state.memory(key))) }
            }
            return taken
        }
    }

    /// These partitions went to another instance: the floors of their timestamps are forgotten (a
    /// partition that comes back gets a new one, past what its owner meanwhile can have stamped),
    /// and one that comes back is gained again for the ends its owner meanwhile made
    /// (``devicesOfRecentEnds(_:owned:now:)``; also when it was lost, without a revocation).
    public func releaseTimestampFloors(_ partitions: some Sequence<Int32>) {
        state.withLock { state in for partition in partitions { state.timestampFloors[partition] = nil } }
        lateDevices.state.withLock { late in late.owned.subtract(partitions) }
    }

    /// The partitions whose changes are tracked for the changelog are now `partitions` (this
    /// instance's assignment; called on each assignment, not on revocations, so that a partition
    /// revoked and assigned back is not written again in full). Until the first call every
    /// partition's changes are tracked (a start's memory, rebuilt, may be ahead of the changelog);
    /// then the others are dropped. A partition gained from another instance has every memory
    /// marked: what this instance knows of it while another owned it was not tracked here, and
    /// its last owner may have stopped before writing it.
    public func trackChanges(of partitions: Set<Int32>) {
        let floor = ContentTimestamps.floor(assignedAt: clock.date)
        state.withLock { state in
            // Partitions gained: their next timestamps start past the previous owner's.
            for partition in partitions where state.timestampFloors[partition] == nil { state.timestampFloors[partition] = floor }
            for partition in state.timestampFloors.keys where !partitions.contains(partition) { state.timestampFloors[partition] = nil }
            let gained = state.unwritten.track(only: partitions)
            if !gained.isEmpty {
                for (key, _, memory) in state.all {
                    if let partition = memory.partition, gained.contains(partition) { state.unwritten.note(key, partition: partition) }
                }
            }
            devicesOfRecentEnds(&state, owned: partitions, now: clock.date)
        }
    }

    /// Memories taken by ``takeUnwritten(partitions:)`` that did not reach the changelog.
    public func unwrittenAgain(_ items: [Unwritten]) {
        state.withLock { state in
            for item in items { state.unwritten.note(item.activityKey, partition: item.partition) }
        }
    }

    /// Activities whose memory changed since it was last written to the changelog, in these partitions.
    public func unwrittenCount(partitions: Set<Int32>) -> Int {
        state.withLock { $0.unwritten.count(partitions: partitions) }
    }

    /// An activity's memory read from the changelog (`nil`: a tombstone, the activity forgotten).
    /// Read before the requests and outcomes after the checkpoint, which then move it on.
    public func restore(_ activityKey: String, _ memory: ActivityMemory?) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            state.set(activityKey, memory, now: now, policy: policy, restored: true)
            if let key = memory?.latestPushToStartKey { state.startOwners[key] = activityKey }
        }
    }

    /// Forgets the memories of `partitions` (revoked, and not assigned back: another instance
    /// owns them now and its changelog has them), without writing anything to the changelog.
    /// - Returns: how many memories were forgotten.
    @discardableResult
    public func forget(partitions: Set<Int32>) -> Int {
        guard !partitions.isEmpty else { return 0 }
        let (now, policy) = (clock.date, freshness)
        return state.withLock { state in
            let keys = state.all.compactMap { item in item.memory.partition.map(partitions.contains) == true ? item.key : nil }
            for key in keys { state.set(key, nil, now: now, policy: policy, restored: true) }
            state.unwritten.drop(partitions: partitions)
            state.dropForgottenStartOwners()
            return keys.count
        }
    }
}
