import Foundation

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
