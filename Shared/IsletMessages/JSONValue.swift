/// Any JSON value, for fields whose shape belongs to someone else (a backend's domain fields).
public enum JSONValue: Hashable, Sendable, Codable {
    case null
    case bool(Bool)
    /// A whole number that fits 64 bits. JSON does not tell `12` from `12.0` or `1.2e1`: all three
    /// read as `.integer(12)`, so a `.number(12.0)` written out reads back as `.integer(12)`. So
    /// does a number whose nearest double is whole: `18446744073709550.5` reads as
    /// `.integer(18446744073709552)`.
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Set to `true` in a decoder's `userInfo` when it reads JSON text (``IsletJSON`` does): each
    /// value is then of exactly one kind, so the likeliest kinds are tried first. Every kind tried
    /// in vain costs a thrown error, and a payload is mostly objects and strings. Without it the
    /// order suits decoders that read a scalar as any kind it spells (YAML's `true` is also a
    /// string), where the narrowest kind must win.
    public static let fromJSONText = CodingUserInfoKey(rawValue: "islet.JSONValue.fromJSONText")!

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if decoder.userInfo[Self.fromJSONText] as? Bool == true {
            self = try Self.decodeJSONText(container)
        } else if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = Self.reading(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    private static func decodeJSONText(_ container: any SingleValueDecodingContainer) throws -> JSONValue {
        if container.decodeNil() { return .null }
        if let value = try? container.decode(String.self) { return .string(value) }
        if let value = try? container.decode([String: JSONValue].self) { return .object(value) }
        if let value = try? container.decode([JSONValue].self) { return .array(value) }
        if let value = try? container.decode(Int64.self) { return .integer(value) }
        if let value = try? container.decode(Double.self) { return Self.reading(value) }
        if let value = try? container.decode(Bool.self) { return .bool(value) }
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
    }

    /// A number read as a double: `.integer` when it is whole and fits 64 bits, as it is once written.
    private static func reading(_ value: Double) -> JSONValue {
        if let whole = Int64(exactly: value) { return .integer(whole) }
        return .number(value)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value):
            // A whole number that fits 64 bits reads back as `.integer`, so it is written as one.
            // Foundation would write 1.844674407370955e16 as `1.844674407370955e+16`, which reads
            // back as the integer 18446744073709550, not the double's exact 18446744073709552:
            // written again, the text would change.
            if let whole = Int64(exactly: value) { try container.encode(whole) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member of an object, or `nil`.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }
}
