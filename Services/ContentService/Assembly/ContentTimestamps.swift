import Foundation

/// content-service's rule for a request's `aps.timestamp` (epoch seconds), in one place.
///
/// iOS shows an update only if its timestamp is not older than what the activity shows, so the
/// timestamps of an activity's requests never go back: each is one past the last while that stays
/// within ``lead`` of the clock. Past that (more than a few updates a second, for seconds) the
/// last one is repeated — an equal timestamp is not older: iOS shows it, and the dispatcher
/// coalesces the updates of such a burst that wait behind one in flight — rather than letting a
/// burst drift ahead of real time (a timestamp far ahead would hide every later update until the
/// clock catches up; more than 8 hours ahead, iOS drops it). No timestamp is ever more than
/// ``lead`` ahead of the clock of the instance that stamps it.
///
/// A partition newly assigned to this instance starts at ``lead`` past its assignment (``floor``):
/// its previous owner may still write requests it stamped before giving the partition up (at most
/// ``lead`` ahead of its clock, which gave the partition up before this one took it), and the
/// next content must not be older than those — an equal timestamp is not older. Until the clock
/// passes the floor, the floor is the timestamp.
public enum ContentTimestamps {
    /// How far ahead of the clock a timestamp may go, in seconds (Apple's guidance since iOS 26:
    /// a timestamp is when the content was true, not a sequence number; issue 61 item 8).
    public static let lead: Int64 = 2

    /// The timestamp of the next request of an activity: `wanted` (the event's time, or now),
    /// within ``lead`` of `now`, at least `floor` (a partition's, after its assignment), and
    /// never before `last` (the activity's last timestamp).
    public static func next(wanted: Int64, now: Date, last: Int64?, floor: Int64? = nil) -> Int64 {
        let cap = seconds(now) + lead
        var timestamp = min(wanted, cap)
        if let floor { timestamp = max(timestamp, floor) }
        if let last, timestamp <= last {
            // One past the last while within the lead (or up to the floor); past it, the last
            // again (never back).
            timestamp = max(last, min(last + 1, max(cap, floor ?? .min)))
        }
        return timestamp
    }

    /// The floor of a partition assigned at `now`: not older than what its previous owner can have
    /// stamped (at most ``lead`` past its clock, which gave the partition up before `now`), and not
    /// more than ``lead`` ahead of `now` either.
    public static func floor(assignedAt now: Date) -> Int64 { seconds(now) + lead }

    /// Epoch seconds, rounded down.
    public static func seconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }
}
