import Foundation
import IsletMessages

/// `POST …/invalidate`: the app says the token must not be used any more.
public struct InvalidateRequest: Codable, Sendable, Equatable {
    /// `clientEnded` (the app ended the activity), `userDismissed` or `ineligible`.
    public var reason: InvalidationReason

    public init(reason: InvalidationReason) { self.reason = reason }
}
