import Foundation
import IsletMessages

/// Typed values of the content state, from the backend's JSON.
enum FieldValue {
    /// Seconds since 2001-01-01: how `JSONDecoder`'s default strategy, which ActivityKit uses for
    /// `ContentState`, reads a `Date`.
    static func referenceSeconds(_ date: Date) -> Double { date.timeIntervalSinceReferenceDate }

    static func matches(_ value: JSONValue, _ kind: ActivityTemplate.Field.Kind) -> Bool {
        convert(value, to: kind) != nil
    }

    /// The value as the app's `ContentState` decodes it, or `nil` when it cannot be one.
    static func convert(_ value: JSONValue, to kind: ActivityTemplate.Field.Kind) -> JSONValue? {
        switch (kind, value) {
        case (.string, .string): value
        case (.string, .integer(let n)): .string(String(n))
        case (.int, .integer): value
        case (.int, .number(let n)) where n.rounded() == n && abs(n) < 9e15: .integer(Int64(n))
        case (.double, .number): value
        case (.double, .integer(let n)): .number(Double(n))
        case (.bool, .bool): value
        // Dates: ISO 8601 text, or epoch seconds.
        case (.date, .string(let text)): IsletDate.parse(text).map { .number(referenceSeconds($0)) }
        case (.date, .integer(let n)): .number(referenceSeconds(Date(timeIntervalSince1970: TimeInterval(n))))
        case (.date, .number(let n)): .number(referenceSeconds(Date(timeIntervalSince1970: n)))
        default: nil
        }
    }

    /// A dotted path (`courier.name`) into the domain fields.
    static func lookup(_ path: String, in fields: [String: JSONValue]) -> JSONValue? {
        var current: JSONValue = .object(fields)
        for part in path.split(separator: ".") {
            guard let next = current[String(part)] else { return nil }
            current = next
        }
        return current
    }

    /// The domain fields as Mustache renders them.
    static func renderable(_ value: JSONValue) -> Any {
        switch value {
        case .null: return ""
        case .bool(let b): return b
        case .integer(let n): return n
        case .number(let n): return n.rounded() == n && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .string(let s): return s
        case .array(let items): return items.map(renderable)
        case .object(let members): return members.mapValues(renderable)
        }
    }
}
