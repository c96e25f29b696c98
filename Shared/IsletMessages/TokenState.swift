/// Whether a push token may be used.
public struct TokenState: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The current token for its key: pushes go to it.
    public static let active = TokenState(rawValue: "active")
    /// Replaced by a newer token for the same key (tokens rotate); not used any more.
    public static let superseded = TokenState(rawValue: "superseded")
    /// Must never be sent to again; `invalidation` says why.
    public static let invalidated = TokenState(rawValue: "invalidated")

    public static let knownValues: [TokenState] = [.active, .superseded, .invalidated]
}
