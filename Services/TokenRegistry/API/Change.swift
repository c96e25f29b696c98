import Foundation
import IsletMessages

/// What a write did.
public struct Change: RawRepresentable, Codable, Sendable, Hashable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A token for a key the registry did not know.
    public static let registered = Change(rawValue: "registered")
    /// A new token replaced the key's previous one.
    public static let rotated = Change(rawValue: "rotated")
    /// A re-registration after APNs invalidated the token.
    public static let reactivated = Change(rawValue: "reactivated")
    /// The activity's owner, proven by a ticket, replaced another user's registration that had none.
    public static let claimed = Change(rawValue: "claimed")
    /// Other fields changed (frequent updates, app version, start time).
    public static let updated = Change(rawValue: "updated")
    /// The same token registered again, more than ``Registry/confirmationInterval`` after its
    /// registration time, which moves on: APNs's verdict on the token from before it is not believed.
    public static let confirmed = Change(rawValue: "confirmed")
    public static let invalidated = Change(rawValue: "invalidated")
    /// The request repeated the current state: nothing was written.
    public static let unchanged = Change(rawValue: "unchanged")
}
