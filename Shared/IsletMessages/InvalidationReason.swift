import Foundation

/// Why a push token was invalidated.
public struct InvalidationReason: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The app reported that the activity ended.
    public static let clientEnded = InvalidationReason(rawValue: "clientEnded")
    /// The user dismissed the activity from the lock screen.
    public static let userDismissed = InvalidationReason(rawValue: "userDismissed")
    /// The user switched Live Activities off for the app, or the device cannot show them.
    public static let ineligible = InvalidationReason(rawValue: "ineligible")
    /// APNs answered 410 `Unregistered`.
    public static let apnsUnregistered = InvalidationReason(rawValue: "apnsUnregistered")
    /// APNs answered 410 `ExpiredToken`.
    public static let apnsExpiredToken = InvalidationReason(rawValue: "apnsExpiredToken")
    /// APNs answered 400 `BadDeviceToken` (e.g. a sandbox token sent to production).
    public static let apnsBadDeviceToken = InvalidationReason(rawValue: "apnsBadDeviceToken")
    /// APNs answered 400 `DeviceTokenNotForTopic`: the token belongs to another app.
    public static let apnsDeviceTokenNotForTopic = InvalidationReason(rawValue: "apnsDeviceTokenNotForTopic")
    /// The freshness monitor ended the activity because its content stayed stale too long.
    public static let severelyStale = InvalidationReason(rawValue: "severelyStale")
    /// The activity reached the end of its allowed lifetime (8 hours of updates).
    public static let lifetimeExceeded = InvalidationReason(rawValue: "lifetimeExceeded")
    /// A backend ended the activity through the registry's API (the order was cancelled, …).
    public static let backendEnded = InvalidationReason(rawValue: "backendEnded")
    /// Another user's device record of an activity, when the activity became its owner's (the
    /// owner's registration claimed it, or was its first): never used again.
    public static let claimedByOwner = InvalidationReason(rawValue: "claimedByOwner")
    /// A push-to-start token a start went to that APNs accepted, and after which no update token of
    /// the activity came within the confirmation time (``PushResult/startUnconfirmed``): the token
    /// may be stale (iOS 27). Not used again until the app registers it again.
    public static let startUnconfirmed = InvalidationReason(rawValue: "startUnconfirmed")

    public static let knownValues: [InvalidationReason] = [
        .clientEnded, .userDismissed, .ineligible, .apnsUnregistered, .apnsExpiredToken, .apnsBadDeviceToken,
        .apnsDeviceTokenNotForTopic, .severelyStale, .lifetimeExceeded, .backendEnded, .claimedByOwner, .startUnconfirmed,
    ]

    /// APNs's answer as a verdict on the token it was sent to — the one table apns-dispatcher (which
    /// stops sending to the token) and token-registry (which invalidates it) both read. Every 410
    /// says the token is no longer active for the topic (`Unregistered`, `ExpiredToken`, or a
    /// reason APNs adds later); 400 `BadDeviceToken` and `DeviceTokenNotForTopic` say it never
    /// will be. `nil`: the answer says nothing against the token.
    public init?(apnsStatus status: Int, reason: String?) {
        switch (status, reason) {
        case (410, "ExpiredToken"): self = .apnsExpiredToken
        case (410, _): self = .apnsUnregistered
        case (400, "BadDeviceToken"): self = .apnsBadDeviceToken
        case (400, "DeviceTokenNotForTopic"): self = .apnsDeviceTokenNotForTopic
        default: return nil
        }
    }
}
