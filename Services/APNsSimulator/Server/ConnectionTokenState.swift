import Crypto
import Foundation
import JWTKit

/// The provider token in use on one HTTP/2 connection, and when it was first used there.
public struct ConnectionTokenState: Sendable {
    public private(set) var token: String?
    public private(set) var since: Date?

    /// APNs allows a new token on a connection at most every 20 minutes.
    public static let minimumInterval: TimeInterval = 20 * 60

    public init() {}

    /// Whether `token` may be used on this connection now; records it when it is new and allowed.
    public mutating func admit(_ token: String, now: Date) -> Bool {
        if token == self.token { return true }
        if let since, now.timeIntervalSince(since) < Self.minimumInterval { return false }
        self.token = token
        self.since = now
        return true
    }
}
