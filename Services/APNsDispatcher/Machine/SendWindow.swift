import Foundation

/// How many pushes may wait for APNs's answer at once, adapted to how fast answers come (additive
/// increase, multiplicative decrease, as TCP's congestion window).
///
/// A fixed number (``DispatcherPolicy/maximumInFlight``) is right only while APNs answers quickly.
/// When it slows down — a degraded APNs, or a simulator on a busy machine — a thousand pushes in
/// flight wait their turn at the server until the last ones pass the request deadline: those are
/// cancelled and sent again although APNs may have taken them, so phones get them twice, and the
/// resends add to the queue that made them late. The window keeps the wait short instead:
///
/// - it starts at ``DispatcherPolicy/initialInFlight`` and grows by one per answer that came
///   faster than ``DispatcherPolicy/slowAnswer`` (doubling per round trip) up to half the size it
///   last shrank from, then by one per window's worth of quick answers, up to the maximum;
/// - an answer slower than that, or none (a timeout, a lost connection, a stall), halves it — at
///   most once per `slowAnswer`, so that one slow wave counts once — down to
///   ``DispatcherPolicy/minimumInFlight``.
///
/// Pushes beyond the window wait in their activities' queues, where newer content still replaces
/// older (coalescing), rather than at the server.
struct SendWindow: Sendable, Equatable {
    let minimum: Double
    let maximum: Double
    let slowAnswer: Double
    /// The current window (fractional: congestion avoidance adds 1/window per answer).
    private(set) var size: Double
    /// Below this the window grows by one per quick answer; above it, by one per window.
    private(set) var threshold: Double
    private var lastShrink: Date?

    init(policy: DispatcherPolicy) {
        maximum = Double(max(1, policy.maximumInFlight))
        minimum = min(maximum, Double(max(1, policy.minimumInFlight)))
        slowAnswer = policy.slowAnswer / .seconds(1)
        size = min(maximum, max(minimum, Double(policy.initialInFlight)))
        threshold = maximum
    }

    /// How many may be in flight now.
    var limit: Int { Int(size) }

    /// APNs answered after `seconds` (whatever it said).
    mutating func answered(after seconds: Double, now: Date) {
        if seconds >= slowAnswer {
            shrink(now: now)
        } else if size < threshold {
            size = min(maximum, size + 1)
        } else {
            size = min(maximum, size + 1 / size)
        }
    }

    /// No answer: the request timed out, its connection was lost or it could not be written.
    mutating func unanswered(now: Date) {
        shrink(now: now)
    }

    private mutating func shrink(now: Date) {
        if let lastShrink, now.timeIntervalSince(lastShrink) < slowAnswer { return }
        lastShrink = now
        size = max(minimum, size / 2)
        threshold = size
    }
}
