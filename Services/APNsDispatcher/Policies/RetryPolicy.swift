import Foundation

/// When to try again: exponential backoff with full jitter, bounded in attempts and time.
public struct RetryPolicy: Sendable, Equatable {
    /// The first delay's upper bound; each attempt doubles it, up to ``maximumDelay``.
    public var baseDelay: Duration
    public var maximumDelay: Duration
    /// Attempts in all (the first send included).
    public var maximumAttempts: Int
    /// A request without an `expiration` is given up this long after its first attempt.
    public var maximumDuration: Duration
    /// How long a token that got 429 TooManyRequests is left alone.
    public var tokenBackoff: Duration

    public init(
        baseDelay: Duration = .milliseconds(200), maximumDelay: Duration = .seconds(30), maximumAttempts: Int = 8,
        maximumDuration: Duration = .seconds(300), tokenBackoff: Duration = .seconds(30)
    ) {
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
        self.maximumAttempts = maximumAttempts
        self.maximumDuration = maximumDuration
        self.tokenBackoff = tokenBackoff
    }

    /// The delay before attempt `attempt + 1` after `attempt` failed ones, for `random` in 0..<1.
    public func delay(afterAttempts attempts: Int, random: Double) -> Duration {
        let exponent = min(max(attempts - 1, 0), 20)
        let ceiling = min(baseDelay * (1 << exponent), maximumDelay)
        return ceiling * min(max(random, 0), 1)
    }

    /// Until when a request may still be retried: its `expiration`, or ``maximumDuration`` after
    /// its first attempt.
    public func deadline(expiration: Date?, firstAttempt: Date) -> Date {
        expiration ?? firstAttempt.addingTimeInterval(maximumDuration / .seconds(1))
    }
}
