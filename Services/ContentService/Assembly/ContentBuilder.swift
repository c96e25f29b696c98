import Foundation
import IsletLinks
import IsletMessages
import Mustache

/// Why an event cannot become content: the field at fault and the problem, as for a message that
/// breaks a rule of its type. Such events go to the dead-letter topic (the gRPC API answers
/// INVALID_ARGUMENT naming the field).
public typealias ContentError = MessageValidationError

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

/// Builds an activity's content state (and attributes) for one app version.
struct ContentBuilder {
    let template: ActivityTemplate

    /// The Mustache context: the domain fields, and `state.name` / `state.text`.
    func context(fields: [String: JSONValue], state: ActivityTemplate.State) -> [String: Any] {
        var context = fields.mapValues(FieldValue.renderable)
        var stateContext: [String: Any] = ["name": state.name]
        let base = context
        if let text = state.text { stateContext["text"] = text.render(base) }
        context["state"] = stateContext
        return context
    }

    /// The state an event is in: its `stateField`'s value if the template knows it, else the default.
    func state(of fields: [String: JSONValue]) -> ActivityTemplate.State {
        if let name = fields[template.stateField]?.stringValue, let state = template.states[name] { return state }
        return template.states[template.defaultState]!
    }

    /// Every field `appVersion` decodes, filled from the event or its default; fields the app
    /// version does not know are left out.
    func contentState(fields: [String: JSONValue], context: [String: Any], appVersion: AppVersion) throws(ContentError) -> [String: JSONValue] {
        try values(of: template.contentState, fields: fields, context: context, appVersion: appVersion, path: "fields")
    }

    /// The `ActivityAttributes` of a push-to-start, from the event's attributes (or fields).
    func attributes(_ given: [String: JSONValue], context: [String: Any]) throws(ContentError) -> [String: JSONValue] {
        try values(of: template.attributes, fields: given, context: context, appVersion: nil, path: "attributes")
    }

    private func values(
        of specs: [ActivityTemplate.Field], fields: [String: JSONValue], context: [String: Any], appVersion: AppVersion?, path: String
    ) throws(ContentError) -> [String: JSONValue] {
        var result: [String: JSONValue] = [:]
        for spec in specs {
            if let appVersion, appVersion < spec.since { continue }
            if let template = spec.template {
                result[spec.name] = .string(template.render(context))
                continue
            }
            let source = spec.source ?? spec.name
            if let given = FieldValue.lookup(source, in: fields), given != .null {
                guard let value = FieldValue.convert(given, to: spec.kind) else {
                    throw ContentError(field: "\(path).\(source)", problem: "must be a \(spec.kind.rawValue)")
                }
                result[spec.name] = value
            } else if let fallback = spec.fallback {
                result[spec.name] = fallback == .null ? .null : FieldValue.convert(fallback, to: spec.kind) ?? fallback
            } else if spec.optional {
                result[spec.name] = .null
            } else {
                throw ContentError(field: "\(path).\(source)", problem: "is required by \(template.attributesType)")
            }
        }
        return result
    }
}
