import Foundation
import IsletMessages

/// `PUT /v1/activities/{activityId}/frequent-updates`: the user changed the setting.
public struct FrequentUpdatesRequest: Codable, Sendable, Equatable {
    /// `ActivityAuthorizationInfo().frequentPushesEnabled`, as now.
    public var enabled: Bool

    public init(enabled: Bool) { self.enabled = enabled }
}
