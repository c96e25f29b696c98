import Foundation
import IsletMessages

/// A template variable that renders nothing whatever the event (`{{etaText}}` where no field is
/// called that) makes a text that reads "Arrives at " — on the Lock Screen, or to VoiceOver. Each
/// variable of each text must render something for at least one of the template's `examples`, in
/// the context that text is rendered with: a state's text and a content-state `value:` see the
/// example's fields and `state.name`/`state.text`; the layout, the link and the alerts see the
/// content state's values too (what the event lacks, from the defaults). One that renders nothing in
/// every example stops the service at start-up, naming the file, the place and the variable.
struct ExampleCheck {
    let file: String
    let template: ActivityTemplate
    let examples: [[String: JSONValue]]

    /// A Mustache text of the template: `written` is its place in the file (a state's text, a
    /// content-state value, the layout …), which says what it is rendered with; `path` is where
    /// a problem is reported (a translation's place names its language and text).
    struct Source {
        var path: String
        var written: String
        var text: String
    }

    func check(_ sources: [Source]) throws {
        guard !examples.isEmpty else { throw TemplateError(file: file, path: "examples", problem: "must list at least one example event's fields") }
        let builder = ContentBuilder(template: template)
        try checkKinds(builder)
        let contexts = examples.map { fields -> (base: [String: Any], layout: [String: Any]) in
            let base = builder.context(fields: fields, state: builder.state(of: fields))
            var layout = base
            let values = (try? builder.contentState(fields: fields, context: base, appVersion: .unknown)) ?? [:]
            for (name, value) in values where layout[name] == nil { layout[name] = FieldValue.renderable(value) }
            return (base, layout)
        }
        for source in sources {
            let (path, written, text) = (source.path, source.written, source.text)
            let seesContentState = !(written.hasPrefix("contentState") || (written.hasPrefix("states.") && written.hasSuffix(".text")))
            for variable in Self.variables(in: text)
            where !contexts.contains(where: { Self.renders(variable, in: seesContentState ? $0.layout : $0.base) }) {
                throw TemplateError(
                    file: file, path: path,
                    problem: "{{\(variable)}} renders nothing in every example (examples[0...\(examples.count - 1)]): no field gives it a value")
            }
        }
    }

    /// The names a Mustache text looks up: variables and section names (`{{a.b}}`, `{{#a}}`,
    /// `{{^a}}`, `{{{a}}}`, `{{&a}}`); not comments, partials, delimiters, pragmas or `{{.}}`.
    static func variables(in text: String) -> [String] {
        var names: [String] = []
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            guard let close = rest.range(of: "}}", range: open.upperBound..<rest.endIndex) else { break }
            var tag = rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces)
            rest = rest[close.upperBound...]
            if rest.hasPrefix("}") { rest = rest.dropFirst() }
            guard let first = tag.first, !"!>=%/".contains(first) else { continue }
            if "#^&{".contains(first) { tag = String(tag.dropFirst()).trimmingCharacters(in: .whitespaces) }
            if tag.hasSuffix("}") { tag = String(tag.dropLast()) }
            if !tag.isEmpty, tag != ".", !names.contains(tag) { names.append(tag) }
        }
        return names
    }

    /// Whether `path` (`courier.name`) has a value that renders as something in `context`.
    static func renders(_ path: String, in context: [String: Any]) -> Bool {
        var current: Any = context
        for part in path.split(separator: ".") {
            guard let object = current as? [String: Any], let next = object[String(part)] else { return false }
            current = next
        }
        switch current {
        case let text as String: return !text.isEmpty
        case let list as [Any]: return !list.isEmpty
        case let object as [String: Any]: return !object.isEmpty
        default: return true
        }
    }
}
