import Foundation

/// APNs's verdict that a token is dead, read from a push outcome, and the one rule every service
/// applies to it (token-registry invalidating the token, content-service marking the activity
/// gone, apns-dispatcher no longer sending to it): the verdict kills a registration of that token
/// made at or before the moment APNs says the token was dead — APNs's 410 `timestamp`; for an
/// answer without one (a 400), when the outcome was written. A registration after it (the app
/// registered the token again: confirmed, reactivated) is alive, whenever the verdict is read.
public struct TokenVerdict: Sendable, Equatable {
    public var reason: InvalidationReason
    /// The dead token's fingerprint, when the outcome names it (``PushOutcome/tokenFingerprint``).
    public var fingerprint: String?
    /// Since when the token is known dead.
    public var since: Date

    public init(reason: InvalidationReason, fingerprint: String?, since: Date) {
        self.reason = reason
        self.fingerprint = fingerprint
        self.since = since
    }

    /// The verdict an outcome carries: `tokenInvalid` with APNs's answer that the token is dead;
    /// `nil` for any other outcome (one ended `tokenInvalid` without asking APNs carries none).
    public init?(_ outcome: PushOutcome) {
        guard outcome.result == .tokenInvalid, let apns = outcome.apns,
            let reason = InvalidationReason(apnsStatus: apns.status, reason: apns.reason)
        else { return nil }
        self.init(reason: reason, fingerprint: outcome.tokenFingerprint, since: apns.timestamp ?? outcome.completedAt)
    }

    /// Whether the verdict kills the registration of the token with `fingerprint` made at `registeredAt`.
    public func kills(fingerprint: String, registeredAt: Date) -> Bool {
        (self.fingerprint == nil || self.fingerprint == fingerprint) && registeredAt <= since
    }
}
