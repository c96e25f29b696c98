/// What a push token is for.
public struct TokenKind: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `Activity.pushTokenUpdates`: updates and ends one running activity.
    public static let update = TokenKind(rawValue: "update")
    /// `Activity.pushToStartTokenUpdates`: starts a new activity of one attributes type on one device.
    public static let pushToStart = TokenKind(rawValue: "pushToStart")
    /// `WidgetPushHandler.pushTokenDidChange(_:widgets:)` (iOS 26): reloads the app's home-screen
    /// widgets of one kind on one device (`apns-push-type: widgets`).
    public static let widget = TokenKind(rawValue: "widget")

    public static let knownValues: [TokenKind] = [.update, .pushToStart, .widget]
}
