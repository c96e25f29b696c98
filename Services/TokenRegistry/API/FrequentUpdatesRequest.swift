import Foundation
import IsletMessages

/// `PUT /v1/activities/{activityId}/frequent-updates`: the user changed the setting.
public struct FrequentUpdatesRequest: Codable, Sendable, Equatable {
    /// `ActivityAuthorizationInfo().frequentPushesEnabled`, as now.
    public var enabled: Bool
    /// The device whose setting changed (as registered): that device's record of the activity.
    /// Absent: the activity's own record.
    public var deviceId: String?

    public init(enabled: Bool, deviceId: String? = nil) {
        self.enabled = enabled
        self.deviceId = deviceId
    }
}
