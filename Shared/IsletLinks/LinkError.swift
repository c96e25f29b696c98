/// A link that cannot be made (a bad base URL or target).
public struct LinkError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
