/// The app a token or push belongs to: its bundle id and the APNs environment of its tokens.
///
/// Together they decide where the dispatcher sends (`api.push.apple.com` or
/// `api.sandbox.push.apple.com`) and the `apns-topic` (`<bundleId>.push-type.liveactivity`).
public struct AppTarget: Codable, Sendable, Hashable {
    /// The app's bundle identifier, e.g. `com.example.fooddelivery`.
    public var bundleId: String
    /// The APNs environment the app's tokens were issued for (a debug build gets sandbox tokens).
    public var environment: APNsEnvironment

    public init(bundleId: String, environment: APNsEnvironment) {
        self.bundleId = bundleId
        self.environment = environment
    }
}
