import Foundation
import IsletMessages

/// Typed values of the content state, from the backend's JSON.
enum FieldValue {
    /// Seconds since 2001-01-01: how `JSONDecoder`'s default strategy, which ActivityKit uses for
    /// `ContentState`, reads a `Date`.
    static func referenceSeconds(_ date: Date) -> Double { date.timeIntervalSinceReferenceDate }

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

    /// A `ClosedRange<Date>` as its `Codable` conformance encodes it: `[lower, upper]`, each in
    /// seconds since 2001. From `[start, end]` or `{"start": …, "end": …}`, each a date.
    static func dateRange(_ value: JSONValue, path: String) throws(ContentError) -> JSONValue {
        let ends: (start: JSONValue, end: JSONValue)
        switch value {
        case .array(let items) where items.count == 2: ends = (items[0], items[1])
        case .object(let members) where members.count == 2 && members["start"] != nil && members["end"] != nil: ends = (members["start"]!, members["end"]!)
        default: throw ContentError(field: path, problem: "must be [start, end] or {\"start\": …, \"end\": …}, each a date")
        }
        guard case .number(let lower)? = convert(ends.start, to: .date) else { throw ContentError(field: path, problem: "its start must be a date") }
        guard case .number(let upper)? = convert(ends.end, to: .date) else { throw ContentError(field: path, problem: "its end must be a date") }
        guard lower <= upper else { throw ContentError(field: path, problem: "must not end before it starts") }
        return .array([.number(lower), .number(upper)])
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
