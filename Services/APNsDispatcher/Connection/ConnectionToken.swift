import Foundation

/// The provider token one connection uses, and since when. A connection adopts a newer token only
/// once its own has been in use for 20 minutes.
public struct ConnectionToken: Sendable {
    public private(set) var token: String?
    public private(set) var since: Date?
    public static let minimumLifetime: TimeInterval = 20 * 60

    public init() {}

    /// The token to send with a request now, given the source's `candidate`.
    public mutating func use(candidate: String, now: Date) -> String {
        if let token, let since, token != candidate, now.timeIntervalSince(since) < Self.minimumLifetime { return token }
        if token != candidate {
            token = candidate
            since = now
        }
        return candidate
    }
}
