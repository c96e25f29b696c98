import Foundation

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
