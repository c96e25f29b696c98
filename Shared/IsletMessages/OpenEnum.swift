/// A string enum that keeps values it does not know.
///
/// Writers add values over time (a new outcome, a new surface); an older reader must still read
/// the message and decide what to do, rather than fail to decode it. Conforming types are structs
/// with static members for the known values:
///
/// ```swift
/// public struct Urgency: OpenEnum {
///     public let rawValue: String
///     public init(rawValue: String) { self.rawValue = rawValue }
///     public static let routine = Urgency(rawValue: "routine")
///     public static let knownValues: [Urgency] = [.routine]
/// }
/// ```
public protocol OpenEnum: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible where RawValue == String {
    init(rawValue: String)
    /// The values this code knows.
    static var knownValues: [Self] { get }
}

extension OpenEnum {
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// Whether this code knows the value.
    public var isKnown: Bool { Self.knownValues.contains(self) }

    public var description: String { rawValue }

    /// Throws unless the value is known, naming the field.
    public func requireKnown(field: String) throws(MessageValidationError) {
        guard isKnown else {
            throw MessageValidationError(
                field: field,
                problem: "unknown value \"\(rawValue)\" (known: \(Self.knownValues.map(\.rawValue).joined(separator: ", ")))")
        }
    }
}
