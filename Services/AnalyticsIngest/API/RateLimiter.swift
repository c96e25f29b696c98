import Synchronization

/// Per-client token buckets: each client may send ``burst`` requests at once and
/// ``ratePerSecond`` sustained. Generic over the clock so that tests drive time.
///
/// Bounded: it tracks at most ``maxClients`` clients. When full, it forgets the clients whose
/// bucket has refilled (idle ones, which lose nothing by being forgotten); if every one is still
/// active, it forgets the tenth of them seen least recently — never everyone, so that a flood of
/// new addresses cannot reset the buckets of the clients being limited right now (and one sort
/// per tenth keeps the cost per new client small).
public final class RateLimiter<C: Clock>: Sendable where C.Duration == Duration {
    public enum Decision: Sendable, Equatable {
        case allowed
        /// Refused; the client may try again after this many whole seconds (at least 1).
        case limited(retryAfterSeconds: Int)
    }

    private struct Bucket {
        var tokens: Double
        var updated: C.Instant
    }

    public let ratePerSecond: Double
    public let burst: Double
    public let maxClients: Int
    private let clock: C
    private let buckets = Mutex<[String: Bucket]>([:])

    /// - Parameter ratePerSecond: 0 allows everything.
    public init(ratePerSecond: Double, burst: Double, maxClients: Int, clock: C) {
        self.ratePerSecond = ratePerSecond
        self.burst = max(burst, 1)
        self.maxClients = max(maxClients, 1)
        self.clock = clock
    }

    public func admit(_ client: String, cost: Double = 1) -> Decision {
        guard ratePerSecond > 0 else { return .allowed }
        let now = clock.now
        return buckets.withLock { buckets in
            var bucket: Bucket
            if let existing = buckets[client] {
                bucket = existing
                bucket.tokens = min(burst, bucket.tokens + Self.seconds(bucket.updated.duration(to: now)) * ratePerSecond)
                bucket.updated = now
            } else {
                if buckets.count >= maxClients { evict(&buckets, now: now) }
                bucket = Bucket(tokens: burst, updated: now)
            }
            let decision: Decision
            if bucket.tokens >= cost {
                bucket.tokens -= cost
                decision = .allowed
            } else {
                decision = .limited(retryAfterSeconds: max(1, Int(((cost - bucket.tokens) / ratePerSecond).rounded(.up))))
            }
            buckets[client] = bucket
            return decision
        }
    }

    /// Clients tracked now.
    public var trackedClients: Int { buckets.withLock { $0.count } }

    private func evict(_ buckets: inout [String: Bucket], now: C.Instant) {
        buckets = buckets.filter { _, bucket in bucket.tokens + Self.seconds(bucket.updated.duration(to: now)) * ratePerSecond < burst }
        if buckets.count >= maxClients {
            let oldest = buckets.sorted { $0.value.updated < $1.value.updated }.prefix(max(1, maxClients / 10))
            for (client, _) in oldest { buckets.removeValue(forKey: client) }
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return max(0, Double(seconds) + Double(attoseconds) / 1e18)
    }
}
