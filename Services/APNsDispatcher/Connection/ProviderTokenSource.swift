import Foundation
import Synchronization

/// The provider tokens of one signing key: one per fixed time window, shared by every connection
/// of the process, so that all replicas rotate at the same moments (every ``window``, aligned to
/// the epoch).
///
/// APNs refuses a token older than an hour (403 ExpiredProviderToken) and a new token on one
/// connection more often than every 20 minutes (429 TooManyProviderTokenUpdates). With 30-minute
/// windows a connection switches to the window's token once its own is at least 20 minutes old
/// (``ConnectionToken``), so the token it uses is never older than 50 minutes.
public final class ProviderTokenSource: Sendable {
    public let key: APNsSigningKey
    public let window: TimeInterval
    /// The current window's token: when it is issued, and the token once minted. A renewal starts
    /// a new generation; a mint of an older generation still under way never replaces it.
    private struct Current {
        var generation = 0
        var windowStart: Date?
        var issuedAt = Date.distantPast
        var token: String?
    }

    private let state = Mutex(Current())

    public init(key: APNsSigningKey, window: Duration = .seconds(1_800)) {
        self.key = key
        self.window = window / .seconds(1)
    }

    /// The token of the window `now` falls in (minted on first use; concurrent first uses all
    /// return the one that was stored first).
    public func current(now: Date) async throws -> String {
        let start = windowStart(now)
        let (generation, issuedAt, cached) = state.withLock { state in
            if state.windowStart != start {
                state = Current(generation: state.generation + 1, windowStart: start, issuedAt: start)
            }
            return (state.generation, state.issuedAt, state.token)
        }
        if let cached { return cached }
        let minted = try await key.providerToken(issuedAt: issuedAt)
        return state.withLock { state in
            guard state.generation == generation else { return minted }
            if state.token == nil { state.token = minted }
            return state.token!
        }
    }

    /// APNs said the current token expired: from now on, in this window, ``current(now:)`` gives a
    /// token issued at this moment (every caller the same one).
    public func renew(now: Date) {
        let start = windowStart(now)
        state.withLock { state in
            state = Current(generation: state.generation + 1, windowStart: start, issuedAt: now)
        }
    }

    private func windowStart(_ now: Date) -> Date {
        Date(timeIntervalSince1970: (now.timeIntervalSince1970 / window).rounded(.down) * window)
    }
}
