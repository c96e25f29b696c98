import Foundation
import IsletLinks
import IsletMessages
import Mustache

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
        try Self.values(of: specs, fields: fields, context: context, appVersion: appVersion, path: path, typeName: template.attributesType)
    }

    /// The members `specs` make of `fields` (a content state, attributes, or a nested object's
    /// members) for `appVersion` (`nil`: every member, as for attributes).
    static func values(
        of specs: [ActivityTemplate.Field], fields: [String: JSONValue], context: [String: Any], appVersion: AppVersion?, path: String,
        typeName: String
    ) throws(ContentError) -> [String: JSONValue] {
        var result: [String: JSONValue] = [:]
        for spec in specs {
            if let appVersion, appVersion < spec.since { continue }
            if let template = spec.template {
                result[spec.name] = .string(template.render(context))
                continue
            }
            let source = spec.source ?? spec.name
            let at = "\(path).\(source)"
            if let given = FieldValue.lookup(source, in: fields), given != .null {
                result[spec.name] = try convert(given, spec, context: context, appVersion: appVersion, path: at, typeName: typeName)
            } else if let fallback = spec.fallback {
                result[spec.name] =
                    fallback == .null ? .null : try convert(fallback, spec, context: context, appVersion: appVersion, path: at, typeName: typeName)
            } else if spec.optional {
                result[spec.name] = .null
            } else {
                throw ContentError(field: at, problem: "is required by \(typeName)")
            }
        }
        return result
    }

    /// `given` as `appVersion`'s `ContentState` decodes a field of `spec`'s kind.
    static func convert(
        _ given: JSONValue, _ spec: ActivityTemplate.Field, context: [String: Any], appVersion: AppVersion?, path: String, typeName: String
    ) throws(ContentError) -> JSONValue {
        switch spec.kind {
        case .dateRange:
            return try FieldValue.dateRange(given, path: path)
        case .enumeration:
            return try enumeration(given, spec, appVersion: appVersion, path: path)
        case .array:
            guard case .array(let elements) = given else { throw ContentError(field: path, problem: "must be an array") }
            let item = spec.items[0]
            var converted: [JSONValue] = []
            converted.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                if element == .null, item.optional {
                    converted.append(.null)
                    continue
                }
                converted.append(try convert(element, item, context: context, appVersion: appVersion, path: "\(path)[\(index)]", typeName: typeName))
            }
            return .array(converted)
        case .object:
            guard case .object(let members) = given else { throw ContentError(field: path, problem: "must be an object") }
            return .object(try values(of: spec.fields, fields: members, context: context, appVersion: appVersion, path: path, typeName: typeName))
        case .string, .int, .double, .bool, .date:
            guard let value = FieldValue.convert(given, to: spec.kind) else { throw ContentError(field: path, problem: "must be a \(spec.kind.rawValue)") }
            return value
        }
    }

    /// A case of an `enum` field. One the app version does not decode (its `since` is newer; for
    /// an app of unknown version, any case newer than the field) becomes its `olderApps` case, else
    /// the field's default, else `null` when the field is optional; else the event is refused (the
    /// app would fail to decode the whole content state).
    static func enumeration(_ given: JSONValue, _ spec: ActivityTemplate.Field, appVersion: AppVersion?, path: String) throws(ContentError) -> JSONValue {
        guard case .string(let text) = given, let known = spec.values.first(where: { $0.value == text }) else {
            throw ContentError(field: path, problem: "must be one of \(spec.values.map(\.value).joined(separator: ", "))")
        }
        guard let appVersion else { return given }
        let decodes = { (value: ActivityTemplate.Field.EnumValue) in appVersion == .unknown ? value.since <= spec.since : value.since <= appVersion }
        if decodes(known) { return given }
        let named = { (name: String?) in name.flatMap { name in spec.values.first { $0.value == name && decodes($0) } } }
        if let standIn = named(known.standIn) ?? named(spec.fallback?.stringValue) { return .string(standIn.value) }
        if spec.optional { return .null }
        let app = appVersion == .unknown ? "the app's version is not known" : "the activity's app is \(appVersion)"
        throw ContentError(field: path, problem: "\(text) is decoded by app versions \(known.since) and later, and \(app) (the field has no case it decodes instead)")
    }
}
