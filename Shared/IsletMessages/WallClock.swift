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

/// The clock every decision that depends on time reads (budgets, backoff, staleness, expiry, JWT
/// windows, token waits): a Swift `Clock` of wall-clock instants. Services get
/// ``SystemWallClock``; tests a manual clock they move by hand (IsletTesting's `ManualClock`),
/// so that no test waits for real time to pass.
public protocol WallClock: Clock where Instant == WallInstant {}

extension WallClock {
    /// Now, as a date.
    public var date: Date { now.date }

    /// Suspends until `date` (at once when it has passed); throws when the task is cancelled.
    public func sleep(untilDate date: Date) async throws {
        try await sleep(until: WallInstant(date), tolerance: nil)
    }
}

/// The system's wall clock.
public struct SystemWallClock: WallClock {
    public init() {}

    public var now: WallInstant { WallInstant(Date()) }
    public var minimumResolution: Duration { .microseconds(1) }

    public func sleep(until deadline: WallInstant, tolerance: Duration?) async throws {
        let wait = now.duration(to: deadline)
        if wait > .zero { try await Task.sleep(for: wait, tolerance: tolerance) } else { try Task.checkCancellation() }
    }
}
