/// A configuration value is missing or invalid. The message names the environment variable.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var key: String
    public var problem: String

    public init(key: String, problem: String) {
        self.key = key
        self.problem = problem
    }

    public var variable: String { IsletConfig.variableName(for: key) }
    public var description: String { "configuration error: \(variable) \(problem)" }
}
