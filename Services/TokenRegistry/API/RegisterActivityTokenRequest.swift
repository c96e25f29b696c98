import Foundation
import IsletMessages

/// `PUT /v1/activities/{activityId}/token`: register or rotate an activity's update token.
public struct RegisterActivityTokenRequest: Codable, Sendable, Equatable {
    /// `Activity.pushTokenUpdates`, as hex.
    public var token: String
    /// The Swift type name of the activity's `ActivityAttributes`.
    public var attributesType: String
    public var app: AppTarget
    /// `ActivityAuthorizationInfo().frequentPushesEnabled`.
    public var frequentUpdatesEnabled: Bool
    /// `CFBundleShortVersionString`.
    public var appVersion: String
    /// When the activity started on the device.
    public var activityStartedAt: Date?
    /// The app's own identifier of the device (optional).
    public var deviceId: String?
    /// The activity's ticket from its backend (``ActivityTickets``): proves the caller owns the
    /// activity. Optional unless the registry requires tickets.
    public var ticket: String?
    /// The language the app shows the activity in (BCP 47, e.g. `zh-Hans-CN`; Apple's `zh_Hans_CN`
    /// is taken too): its texts and alerts are rendered in it. Absent: the language it was
    /// registered with before, else the templates' default.
    public var locale: String?

    public init(
        token: String, attributesType: String, app: AppTarget, frequentUpdatesEnabled: Bool, appVersion: String,
        activityStartedAt: Date? = nil, deviceId: String? = nil, ticket: String? = nil, locale: String? = nil
    ) {
        self.token = token
        self.attributesType = attributesType
        self.app = app
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.activityStartedAt = activityStartedAt
        self.deviceId = deviceId
        self.ticket = ticket
        self.locale = locale
    }
}
