/// What keeps a test from running as set up (no broker, a topic not read in time).
public struct TestSetupError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
