import Foundation
import IsletMessages

/// `PUT /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}`: register or
/// rotate a push-to-start token (iOS 17.2+).
public struct RegisterPushToStartTokenRequest: Codable, Sendable, Equatable {
    /// `Activity<…>.pushToStartTokenUpdates`, as hex.
    public var token: String
    /// The APNs environment the token was issued for.
    public var environment: APNsEnvironment
    public var frequentUpdatesEnabled: Bool
    public var appVersion: String
    /// The language of the activities it starts (as ``RegisterActivityTokenRequest/locale``).
    public var locale: String?

    public init(token: String, environment: APNsEnvironment, frequentUpdatesEnabled: Bool, appVersion: String, locale: String? = nil) {
        self.token = token
        self.environment = environment
        self.frequentUpdatesEnabled = frequentUpdatesEnabled
        self.appVersion = appVersion
        self.locale = locale
    }
}
