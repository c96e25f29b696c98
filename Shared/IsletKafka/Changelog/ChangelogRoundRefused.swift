/// A round that could not begin (the requests it must follow were not acknowledged in time, say).
public struct ChangelogRoundRefused: Error, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
}
