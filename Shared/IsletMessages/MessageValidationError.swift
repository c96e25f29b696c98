/// A decoded message that breaks a rule of its type.
public struct MessageValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The field at fault, as a dotted path (`app.bundleId`).
    public var field: String
    public var problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}
