/// A template file that cannot be used: which file, where in it, and why.
public struct TemplateError: Error, Sendable, CustomStringConvertible {
    public var file: String
    public var path: String
    public var problem: String

    public var description: String { "\(file): \(path.isEmpty ? "" : path + ": ")\(problem)" }
}
