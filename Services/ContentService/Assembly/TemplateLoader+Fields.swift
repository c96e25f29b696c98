import IsletMessages

/// A content-state or attributes field of a template file: its kind, where its value comes from,
/// its default, and an enum's cases, an array's element or an object's members.
extension TemplateLoader.Compiler {
    /// - Parameter nested: a member of an object or an array's element (not cut as a text; an
    ///   element has no name).
    func compile(_ raw: TemplateLoader.RawField, at path: String, nested: Bool = false, element: Bool = false) throws -> ActivityTemplate.Field {
        var raw = raw
        // YAML reads `""` as null; for a string that is not optional it means the empty string.
        if raw.type == .string, raw.optional != true, raw.default == .null { raw.default = .string("") }
        if element {
            guard raw.name.isEmpty, raw.from == nil, raw.value == nil, raw.default == nil, raw.since == nil, raw.required == nil else {
                throw fail(path, "an array's element takes a type (and optional, values, items or fields) only")
            }
        } else {
            guard isTypeName(raw.name) else { throw fail(path + ".name", "must be a Swift property name") }
        }
        if raw.value != nil && raw.from != nil { throw fail(path, "takes either from or value, not both") }
        if raw.value != nil && raw.type != .string { throw fail(path + ".value", "templates make strings only") }
        let optional = raw.optional ?? false
        if !element, raw.default == nil && !optional && raw.value == nil && raw.required != true {
            throw fail(path + ".default", "is required (an event may lack \(raw.from ?? raw.name)), unless the field is optional or required")
        }
        if raw.text == true && (raw.type != .string || nested) { throw fail(path + ".text", "only a string of the content state itself is a text") }
        var field = ActivityTemplate.Field(
            name: raw.name, kind: raw.type, since: raw.since ?? AppVersion("0")!, source: raw.value == nil ? (raw.from ?? raw.name) : nil,
            template: try raw.value.map { try mustache($0, at: path + ".value") }, fallback: raw.default, optional: optional,
            isText: raw.text ?? (raw.value != nil && !nested))
        try structure(&field, raw, at: path)
        if let fallback = raw.default, fallback != .null {
            do {
                _ = try ContentBuilder.convert(fallback, field, context: [:], appVersion: nil, path: path + ".default", typeName: "")
            } catch {
                throw fail(path + ".default", error.problem)
            }
        }
        return field
    }

    /// An enum's cases, an array's element, an object's members: each only with its kind.
    func structure(_ field: inout ActivityTemplate.Field, _ raw: TemplateLoader.RawField, at path: String) throws {
        if raw.type != .enumeration, raw.values != nil { throw fail(path + ".values", "only an enum has values") }
        if raw.type != .array, raw.items != nil { throw fail(path + ".items", "only an array has items") }
        if raw.type != .object, raw.fields != nil { throw fail(path + ".fields", "only an object has fields") }
        switch raw.type {
        case .enumeration:
            guard let values = raw.values, !values.isEmpty else { throw fail(path + ".values", "is required by an enum: its cases") }
            var seen: Set<String> = []
            for (i, value) in values.enumerated() {
                guard !value.value.isEmpty, seen.insert(value.value).inserted else { throw fail("\(path).values[\(i)]", "must be a case, once") }
                if let since = value.since, since < field.since { throw fail("\(path).values[\(i)].since", "is before the field's own since") }
            }
            field.values = values.map { .init(value: $0.value, since: $0.since ?? field.since) }
        case .array:
            guard let item = raw.items?.first else { throw fail(path + ".items", "is required by an array: its element, as { type: … }") }
            field.items = [try compile(item, at: path + ".items", nested: true, element: true)]
        case .object:
            guard let members = raw.fields, !members.isEmpty else { throw fail(path + ".fields", "is required by an object: its members") }
            field.fields = try members.enumerated().map { i, member in try compile(member, at: "\(path).fields[\(i)]", nested: true) }
            var seen: Set<String> = []
            for (i, member) in field.fields.enumerated() where !seen.insert(member.name).inserted {
                throw fail("\(path).fields[\(i)].name", "\(member.name) appears twice")
            }
        case .string, .int, .double, .bool, .date, .dateRange:
            break
        }
    }
}
