import Foundation
import IsletMessages

/// `PUT /v1/apps/{bundleId}/devices/{deviceId}/widgets/{kind}`: register or rotate the device's
/// WidgetKit push token (iOS 26) for the app's widgets of one kind.
///
/// The app gets one token for its widgets (`WidgetPushHandler.pushTokenDidChange(_:widgets:)`,
/// with the widgets that take pushes, each with its `kind`) and registers it once per kind: a
/// template names the kinds an activity's events refresh. A kind the user no longer has on a
/// home screen is invalidated (`POST …/widgets/{kind}/invalidate`).
public struct RegisterWidgetTokenRequest: Codable, Sendable, Equatable {
    /// `WidgetPushInfo.token`, as hex.
    public var token: String
    /// The APNs environment the token was issued for.
    public var environment: APNsEnvironment
    public var appVersion: String

    public init(token: String, environment: APNsEnvironment, appVersion: String) {
        self.token = token
        self.environment = environment
        self.appVersion = appVersion
    }
}
