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
