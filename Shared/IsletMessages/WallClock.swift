import Foundation

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
