/// How urgently the user needs to see a change.
public struct Urgency: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Nice to see soon (the ETA moved by a minute); may go at the cheap priority 5.
    public static let routine = Urgency(rawValue: "routine")
    /// The user should see it now (the courier left): priority 10 while the activity's budget lasts, then 5.
    public static let important = Urgency(rawValue: "important")
    /// Must be seen at once (the courier is at the door): waits for priority-10 budget rather than being downgraded.
    public static let critical = Urgency(rawValue: "critical")

    public static let knownValues: [Urgency] = [.routine, .important, .critical]
}
