import Foundation

/// One live activity that is not fresh, for the stale-activities query.
public struct StaleActivity: Sendable, Equatable {
    public var activityId: String
    /// The activity's app.
    public var bundleId: String
    public var attributesType: String
    public var freshness: Freshness
    public var staleSince: Date
    public var contentSequence: Int64
    public var resends: Int
}
