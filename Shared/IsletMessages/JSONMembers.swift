import Foundation

/// Reading members as the synthesized `Decodable` conformances read them.
public struct JSONMembers {
    public let members: [String: JSONValue]

    public init?(_ value: JSONValue) {
        guard case .object(let members) = value else { return nil }
        self.members = members
    }

    /// Whether the key is absent or `null` (an optional's `nil`).
    public func isAbsent(_ key: String) -> Bool {
        switch members[key] {
        case nil, .null?: true
        default: false
        }
    }

    /// An optional member read by `read`: `.some(nil)` when absent or `null`, `nil` when `read`
    /// does not take it (another kind).
    public func optional<Value>(_ key: String, _ read: (String) -> Value?) -> Value?? {
        if isAbsent(key) { return .some(nil) }
        return read(key).map { .some($0) }
    }

    public func string(_ key: String) -> String? {
        if case .string(let value)? = members[key] { value } else { nil }
    }

    public func integer(_ key: String) -> Int64? {
        if case .integer(let value)? = members[key] { value } else { nil }
    }

    public func int(_ key: String) -> Int? {
        integer(key).flatMap { Int(exactly: $0) }
    }

    public func bool(_ key: String) -> Bool? {
        if case .bool(let value)? = members[key] { value } else { nil }
    }

    public func date(_ key: String) -> Date? {
        string(key).flatMap(IsletDate.parse)
    }

    /// An array of strings only.
    public func strings(_ key: String) -> [String]? {
        guard case .array(let items)? = members[key] else { return nil }
        var strings: [String] = []
        strings.reserveCapacity(items.count)
        for item in items {
            guard case .string(let value) = item else { return nil }
            strings.append(value)
        }
        return strings
    }

    public func object(_ key: String) -> [String: JSONValue]? {
        if case .object(let value)? = members[key] { value } else { nil }
    }
}
