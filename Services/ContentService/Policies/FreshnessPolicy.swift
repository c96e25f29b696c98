/// The freshness monitor's rules (Lyft's Freshness Monitor): what the phone shows goes out of date
/// at the content's stale date, or at once when its delivery failed. A stale activity is first
/// re-sent its latest content at priority 10 (a bounded number of times, spaced); one stale for
/// longer than `severeAfter` is ended with its final content. Independently, every activity is
/// ended with its latest content before iOS's 8-hour limit, at `lifetime` after its start.
public struct FreshnessPolicy: Sendable {
    /// How often the monitor looks (`ISLET_FRESHNESS_INTERVAL_SECONDS`, default 5).
    public var checkInterval: Duration = .seconds(5)
    /// Re-sends of one content at most (`ISLET_FRESHNESS_RESENDS`, default 3).
    public var maximumResends = 3
    /// At least this long between two re-sends of an activity (`ISLET_FRESHNESS_RESEND_SPACING_SECONDS`, default 60).
    public var resendSpacing: Duration = .seconds(60)
    /// Stale for this long: severely stale, ended (`ISLET_FRESHNESS_SEVERE_SECONDS`, default 600).
    public var severeAfter: Duration = .seconds(600)
    /// Ended with its final content this long after its start (`ISLET_ACTIVITY_LIFETIME_SECONDS`,
    /// default 7 h 50 min: iOS stops showing updates at 8 hours).
    public var lifetime: Duration = .seconds(7 * 3_600 + 50 * 60)
    /// A push-to-start APNs accepted whose activity's update token has not come within this long
    /// is reported `startUnconfirmed` (`ISLET_START_CONFIRMATION_SECONDS`, default 60): its
    /// push-to-start token may be stale, and token-registry stops using it until the app
    /// registers it again.
    public var startConfirmation: Duration = .seconds(60)
    /// An activity not heard of for this long is forgotten (its events are then treated as new).
    public var retention: Duration = .seconds(9 * 3_600)

    public init() {}
}
