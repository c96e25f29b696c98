/// What an event or push does to an activity.
public struct ActivityEventKind: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The activity begins (remotely through push-to-start, or the app started it itself).
    public static let start = ActivityEventKind(rawValue: "start")
    /// New content for a running activity.
    public static let update = ActivityEventKind(rawValue: "update")
    /// The activity is over: final content, then iOS removes it.
    public static let end = ActivityEventKind(rawValue: "end")

    public static let knownValues: [ActivityEventKind] = [.start, .update, .end]
}
