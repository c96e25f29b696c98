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
        if raw.default == .null, !optional, raw.type != .string {
            throw fail(path + ".default", "is null, and the field is not optional (the app could not decode it)")
        }
        if let fallback = raw.default, fallback != .null {
            do {
                _ = try ContentBuilder.convert(fallback, field, context: [:], appVersion: nil, path: path + ".default", typeName: "")
            } catch {
                throw fail(path + ".default", error.problem)
            }
        }
        return field
    }

    /// What an app older than a case is sent instead (its `olderApps`, else the field's
    /// default) is a case every app that has the field decodes; so is the default.
    func checkStandIns(_ field: ActivityTemplate.Field, at path: String) throws {
        let original = { (name: String) in field.values.first { $0.value == name && $0.since == field.since } }
        for (i, value) in field.values.enumerated() {
            guard let standIn = value.standIn else { continue }
            guard value.since > field.since else { throw fail("\(path).values[\(i)].olderApps", "only a case newer than its field has one") }
            guard original(standIn) != nil else {
                throw fail("\(path).values[\(i)].olderApps", "must be a case every app with the field decodes (one without a since of its own)")
            }
        }
        if case .string(let fallback)? = field.fallback, field.values.contains(where: { $0.value == fallback }), original(fallback) == nil {
            throw fail(path + ".default", "is a case newer than its field: the apps before it could not decode it")
        }
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
            field.values = values.map { .init(value: $0.value, since: $0.since ?? field.since, standIn: $0.olderApps) }
            try checkStandIns(field, at: path)
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

extension ExampleCheck {
    /// Every example builds, for every app version the file names (and for an app of unknown
    /// version): a value of the wrong kind or a case an app could not be sent stops the service.
    func checkKinds(_ builder: ContentBuilder) throws {
        var versions: Set<String> = [AppVersion.unknown.description]
        func collect(_ fields: [ActivityTemplate.Field]) {
            for field in fields {
                versions.insert(field.since.description)
                for value in field.values { versions.insert(value.since.description) }
                collect(field.items + field.fields)
            }
        }
        collect(template.contentState)
        for (i, fields) in examples.enumerated() {
            let context = builder.context(fields: fields, state: builder.state(of: fields))
            for version in versions.sorted().compactMap(AppVersion.init) {
                do {
                    _ = try builder.contentState(fields: fields, context: context, appVersion: version)
                } catch {
                    let app = version == .unknown ? "an app of unknown version" : "app \(version)"
                    throw TemplateError(file: file, path: "examples[\(i)]", problem: "\(error.field) \(error.problem) (for \(app))")
                }
            }
        }
    }
}
