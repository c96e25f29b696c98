import Foundation

/// content-service's rule for a request's `aps.timestamp` (epoch seconds), in one place.
///
/// iOS shows an update only if its timestamp is not older than what the activity shows, so the
/// timestamps of an activity's requests never go back: each is one past the last while that stays
/// within ``lead`` of the clock. Past that (more than a few updates a second, for seconds) the
/// last one is repeated — an equal timestamp is not older: iOS shows it — rather than letting a
/// burst drift ahead of real time (a timestamp far ahead would hide every later update until the
/// clock catches up; more than 8 hours ahead, iOS drops it).
///
/// A partition newly assigned to this instance starts past ``lead`` of its assignment (``floor``):
/// its previous owner may still write requests it stamped before giving the partition up (up to
/// ``lead`` ahead of its clock, or up to its own floor right after its own assignment, which came
/// earlier), and the next content must not be older than those. Until the clock passes the floor,
/// the floor is the timestamp (at most `lead + 1` s ahead, for a second or so).
public enum ContentTimestamps {
    /// How far ahead of the clock a timestamp may go, in seconds.
    public static let lead: Int64 = 5

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

    /// The floor of a partition assigned at `now`: past what its previous owner can have stamped
    /// (at most ``lead`` past its clock, which gave the partition up before `now`). Right after the
    /// assignment a timestamp is then one second more than ``lead`` ahead.
    public static func floor(assignedAt now: Date) -> Int64 { seconds(now) + lead + 1 }

    /// Epoch seconds, rounded down.
    public static func seconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }
}
