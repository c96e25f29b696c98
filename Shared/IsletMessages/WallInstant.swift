import Foundation

/// A moment of wall-clock time: what a ``WallClock`` reads. Islet's decisions are about dates that
/// also travel on the wire (timestamps, stale dates, expirations, JWT windows), so its clock's
/// instants are dates.
public struct WallInstant: InstantProtocol, Sendable {
    public var date: Date

    public init(_ date: Date) { self.date = date }

    public func advanced(by duration: Duration) -> WallInstant { WallInstant(date.addingTimeInterval(duration / .seconds(1))) }
    public func duration(to other: WallInstant) -> Duration { .seconds(other.date.timeIntervalSince(date)) }
    public static func < (lhs: WallInstant, rhs: WallInstant) -> Bool { lhs.date < rhs.date }
}
