/// What a push token is for.
public struct TokenKind: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `Activity.pushTokenUpdates`: updates and ends one running activity.
    public static let update = TokenKind(rawValue: "update")
    /// `Activity.pushToStartTokenUpdates`: starts a new activity of one attributes type on one device.
    public static let pushToStart = TokenKind(rawValue: "pushToStart")

    public static let knownValues: [TokenKind] = [.update, .pushToStart]
}
