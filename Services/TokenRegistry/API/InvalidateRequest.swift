import Foundation
import IsletMessages

/// `POST …/invalidate`: the app says the token must not be used any more.
public struct InvalidateRequest: Codable, Sendable, Equatable {
    /// `clientEnded` (the app ended the activity), `userDismissed` or `ineligible`.
    public var reason: InvalidationReason
    /// The device it ended on (the app's own identifier, as registered): that device's record of
    /// the activity. Absent: the activity's own record (the only one of an app that names no devices).
    public var deviceId: String?

    public init(reason: InvalidationReason, deviceId: String? = nil) {
        self.reason = reason
        self.deviceId = deviceId
    }
}
