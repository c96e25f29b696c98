import Foundation
import IsletMessages
import Mustache
import Yams

/// Reads template files (`*.yaml`, `*.yml`, `*.json`) and checks them: every Mustache template
/// parses, every type and version is known, every field that may be missing has a default, every
/// state named exists, every timer names a date or a date range field, every example builds for
/// every app version the file names. A bad file stops the service at start-up
/// with the file, the place in it and the problem.
public enum TemplateLoader {
    /// Every template in `directory`, by attributes type.
    public static func load(directory: String) throws -> [String: ActivityTemplate] {
        let files = try FileManager.default.contentsOfDirectory(atPath: directory)
            .filter { $0.hasSuffix(".yaml") || $0.hasSuffix(".yml") || $0.hasSuffix(".json") }.sorted()
        var templates: [String: ActivityTemplate] = [:]
        for file in files {
            let path = (directory as NSString).appendingPathComponent(file)
            let template = try load(text: try String(contentsOfFile: path, encoding: .utf8), file: file)
            guard templates[template.attributesType] == nil else {
                throw TemplateError(file: file, path: "attributesType", problem: "\(template.attributesType) is described by another file too")
            }
            templates[template.attributesType] = template
        }
        return templates
    }

    /// One template from its text (YAML, of which JSON is a part).
    public static func load(text: String, file: String) throws -> ActivityTemplate {
        let raw: RawTemplate
        do {
            raw = try YAMLDecoder().decode(RawTemplate.self, from: text)
        } catch let error as DecodingError {
            throw TemplateError(file: file, path: Self.path(of: error), problem: Self.problem(of: error))
        } catch {
            throw TemplateError(file: file, path: "", problem: "not YAML: \(error)")
        }
        let compiler = Compiler(file: file)
        var template = try compiler.compile(raw)
        if let examples = raw.examples {
            try ExampleCheck(file: file, template: template, examples: examples).check(compiler.sources)
        }
        for (tag, texts) in (raw.translations ?? [:]).sorted(by: { $0.key < $1.key }) {
            let path = "translations.\(tag)"
            guard let language = LanguageTag(tag), language.description == tag else {
                throw TemplateError(
                    file: file, path: path, problem: "must be a language tag as registered, like zh-Hans or pt-BR (BCP 47, canonical case)")
            }
            // The same file compiled with the language's texts in place of the default ones.
            let translator = Compiler(file: file, translations: texts, language: tag)
            let translated = try translator.compile(raw)
            if let unused = texts.keys.sorted().first(where: { !translator.translated.contains($0) }) {
                throw TemplateError(file: file, path: path, problem: "\"\(unused.prefix(60))\" is not a text of this template")
            }
            if let examples = raw.examples {
                try ExampleCheck(file: file, template: translated, examples: examples).check(translator.sources)
            }
            template.languages[tag] = translated
        }
        return template
    }

    static func path(of error: DecodingError) -> String {
        let context: DecodingError.Context? =
            switch error {
            case .typeMismatch(_, let c), .valueNotFound(_, let c), .keyNotFound(_, let c), .dataCorrupted(let c): c
            @unknown default: nil
            }
        var path = context?.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".") ?? ""
        if case .keyNotFound(let key, _) = error { path += (path.isEmpty ? "" : ".") + key.stringValue }
        return path.replacingOccurrences(of: ".[", with: "[")
    }

    static func problem(of error: DecodingError) -> String {
        switch error {
        case .keyNotFound: "is required"
        case .typeMismatch(let type, _): "must be \(type)"
        case .valueNotFound(let type, _): "must be \(type), not null"
        case .dataCorrupted(let context): context.debugDescription
        @unknown default: "\(error)"
        }
    }

    // MARK: The file's shape

    struct RawTemplate: Decodable {
        var attributesType: String
        var description: String?
        var app: AppTarget?
        var stateField: String?
        var defaultState: String
        var link: String
        var attributes: [RawField]?
        var contentState: [RawField]
        var layout: RawLayout?
        var states: [String: RawState]
        /// Domain fields of example events (one per state, typically): every template variable must
        /// render something in at least one of them (``ExampleCheck``).
        var examples: [[String: JSONValue]]?
        /// Per language (BCP 47): a template text as written above → the same text in that language.
        var translations: [String: [String: String]]?
        /// `{storagePolicy: 0 or 1}`: the type is sent by broadcast.
        var broadcast: RawBroadcast?
        /// `{kinds: [...], states: [...]}`: the home-screen widgets the type's events refresh (iOS 26).
        var widgets: RawWidgets?
    }

    struct RawWidgets: Decodable {
        var kinds: [String]
        var states: [String]?
    }

    struct RawBroadcast: Decodable {
        var storagePolicy: Int
    }

    struct RawField: Decodable {
        var name: String
        var type: ActivityTemplate.Field.Kind
        var since: AppVersion?
        var from: String?
        var value: String?
        var `default`: JSONValue?
        var optional: Bool?
        /// The event must carry it (no default): an event without it is refused.
        var required: Bool?
        /// A text for people: may be cut to fit 4 KB.
        var text: Bool?
        /// An `enum`'s cases: `[placed, { value: ready, since: "1.3" }]`.
        var values: [RawEnumValue]?
        /// An `array`'s element: `{ type: string }` (written as one field, kept as a list of one).
        var items: [RawField]?
        /// An `object`'s members.
        var fields: [RawField]?

        enum CodingKeys: String, CodingKey { case name, type, since, from, value, `default`, optional, required, text, values, items, fields }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            // An array's element has no name of its own.
            name = try container.decodeIfPresent(String.self, forKey: .name) ?? ""
            values = try container.decodeIfPresent([RawEnumValue].self, forKey: .values)
            items = try container.decodeIfPresent(RawField.self, forKey: .items).map { [$0] }
            fields = try container.decodeIfPresent([RawField].self, forKey: .fields)
            type = try container.decode(ActivityTemplate.Field.Kind.self, forKey: .type)
            since = try container.decodeIfPresent(AppVersion.self, forKey: .since)
            from = try container.decodeIfPresent(String.self, forKey: .from)
            value = try container.decodeIfPresent(String.self, forKey: .value)
            // Present but null (which is also how YAML reads `""`) is a value: null.
            if container.contains(.default) {
                self.default = try container.decodeNil(forKey: .default) ? .null : try container.decode(JSONValue.self, forKey: .default)
            }
            optional = try container.decodeIfPresent(Bool.self, forKey: .optional)
            required = try container.decodeIfPresent(Bool.self, forKey: .required)
            text = try container.decodeIfPresent(Bool.self, forKey: .text)
        }
    }

    /// A case of an `enum` field: its value, or `{ value: …, since: "1.3", olderApps: … }`.
    struct RawEnumValue: Decodable {
        var value: String
        var since: AppVersion?
        /// The case sent instead to an app older than `since`.
        var olderApps: String?

        private enum Keys: String, CodingKey { case value, since, olderApps }

        init(from decoder: any Decoder) throws {
            if let value = try? decoder.singleValueContainer().decode(String.self) {
                self.value = value
                return
            }
            let container = try decoder.container(keyedBy: Keys.self)
            value = try container.decode(String.self, forKey: .value)
            since = try container.decodeIfPresent(AppVersion.self, forKey: .since)
            olderApps = try container.decodeIfPresent(String.self, forKey: .olderApps)
        }
    }

    struct RawLayout: Decodable {
        var since: AppVersion
        var minimal: [RawComponent]?
        var compactLeading: [RawComponent]?
        var compactTrailing: [RawComponent]?
        var expanded: [RawComponent]?
        var lockScreen: [RawComponent]?
    }

    struct RawComponent: Decodable {
        var richText: [RawElement]?
        var progressBar: RawProgressBar?
        var remoteImage: RawImage?
        var accessibility: String?
    }

    struct RawElement: Decodable {
        var text: String?
        var icon: String?
        var timer: String?
        var countsDown: Bool?
        var rank: Int?
        var element: String?
    }

    struct RawProgressBar: Decodable {
        var position: String
        var points: [Double]?
    }

    struct RawImage: Decodable {
        var url: String
    }

    struct RawState: Decodable {
        var text: String?
        var staleAfterSeconds: Int?
        var relevance: Double?
        var alert: RawAlert?
    }

    struct RawAlert: Decodable {
        var title: RawAlertText
        var body: RawAlertText
        var sound: String?
    }

    /// An alert's title or body: a text, or the key of a string the app localizes
    /// (`{ locKey: ORDER_ON_THE_WAY, locArgs: ["{{courier.name}}"] }`).
    enum RawAlertText: Decodable {
        case text(String)
        case localized(key: String, args: [String])

        private enum Keys: String, CodingKey { case locKey, locArgs }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                self = .text(text)
                return
            }
            let container = try decoder.container(keyedBy: Keys.self)
            self = .localized(key: try container.decode(String.self, forKey: .locKey), args: try container.decodeIfPresent([String].self, forKey: .locArgs) ?? [])
        }
    }

    // MARK: Checking

    final class Compiler {
        let file: String
        /// A language's texts: each text of the file found here is compiled in its place.
        let translations: [String: String]
        let language: String?
        /// Every Mustache text of the file, with its place as written (what it is rendered with
        /// depends on it) and as reported (a translation's names its language and text).
        private(set) var sources: [ExampleCheck.Source] = []
        /// The texts of the file ``translations`` had.
        private(set) var translated: Set<String> = []

        init(file: String, translations: [String: String] = [:], language: String? = nil) {
            self.file = file
            self.translations = translations
            self.language = language
        }

        func fail(_ path: String, _ problem: String) -> TemplateError { TemplateError(file: file, path: path, problem: problem) }

        func mustache(_ written: String, at writtenPath: String) throws -> TemplateText {
            var (text, path) = (written, writtenPath)
            if let translation = translations[written], let language {
                translated.insert(written)
                (text, path) = (translation, "translations.\(language)[\"\(written.prefix(40))\"] (\(writtenPath))")
            }
            sources.append(ExampleCheck.Source(path: path, written: writtenPath, text: text))
            do {
                // Plain text, not HTML: "Tom & Jerry" stays as it is.
                return try TemplateText(text)
            } catch {
                throw fail(path, "not a Mustache template: \(error)")
            }
        }

        func compileLayout(_ rawLayout: RawLayout, attributesType: String, dates: Set<String>) throws -> ActivityTemplate.Layout {
            func components(_ list: [RawComponent]?, _ name: String) throws -> [ActivityTemplate.Component] {
                try (list ?? []).enumerated().map { i, c in try compile(c, at: "layout.\(name)[\(i)]", dates: dates) }
            }
            // The collapsed island opens one widget URL wherever it is tapped: no element links.
            for (name, list) in [("minimal", rawLayout.minimal), ("compactLeading", rawLayout.compactLeading), ("compactTrailing", rawLayout.compactTrailing)] {
                try refuseElementLinks(list ?? [], region: name, attributesType: attributesType)
            }
            if let lockScreen = rawLayout.lockScreen, lockScreen.isEmpty {
                throw fail("layout.lockScreen", "must list at least one component, or be left out")
            }
            return ActivityTemplate.Layout(
                since: rawLayout.since, minimal: try components(rawLayout.minimal, "minimal"),
                compactLeading: try components(rawLayout.compactLeading, "compactLeading"),
                compactTrailing: try components(rawLayout.compactTrailing, "compactTrailing"), expanded: try components(rawLayout.expanded, "expanded"),
                lockScreen: try rawLayout.lockScreen.map { try components($0, "lockScreen") })
        }

        func compileStates(_ rawStates: [String: RawState]) throws -> [String: ActivityTemplate.State] {
            var states: [String: ActivityTemplate.State] = [:]
            for (name, state) in rawStates {
                let path = "states.\(name)"
                let staleAfter = state.staleAfterSeconds ?? 180
                guard (10...8 * 3_600).contains(staleAfter) else { throw fail(path + ".staleAfterSeconds", "must be 10 to 28800") }
                let relevance = state.relevance ?? 50
                guard relevance >= 0, relevance <= 100 else { throw fail(path + ".relevance", "must be 0 to 100") }
                states[name] = ActivityTemplate.State(
                    name: name, text: try state.text.map { try mustache($0, at: path + ".text") }, staleAfter: .seconds(staleAfter),
                    relevance: relevance,
                    alert: try state.alert.map {
                        ActivityTemplate.Alert(
                            title: try alertText($0.title, at: path + ".alert.title"), body: try alertText($0.body, at: path + ".alert.body"),
                            sound: $0.sound)
                    })
            }
            return states
        }

        func compile(_ raw: RawTemplate) throws -> ActivityTemplate {
            guard isTypeName(raw.attributesType) else { throw fail("attributesType", "must be a Swift type name") }
            guard !raw.states.isEmpty else { throw fail("states", "must name at least one state") }
            if let app = raw.app, !app.environment.isKnown { throw fail("app.environment", "must be production or sandbox") }
            guard raw.states[raw.defaultState] != nil else { throw fail("defaultState", "\(raw.defaultState) is not one of the states") }
            if let broadcast = raw.broadcast {
                guard broadcast.storagePolicy == 0 || broadcast.storagePolicy == 1 else { throw fail("broadcast.storagePolicy", "must be 0 or 1") }
                // A broadcast has no token to name its app.
                guard raw.app != nil else { throw fail("app", "is required with broadcast: a broadcast has no token to name its app") }
                guard raw.translations?.isEmpty ?? true else {
                    throw fail("translations", "a broadcast is one payload for every phone: it has no language of its own (leave texts to loc-key)")
                }
            }
            let widgets = try raw.widgets.map { widgets in
                guard raw.broadcast == nil else {
                    throw fail("widgets", "a broadcast type's events name no user, whose devices' widgets they could refresh")
                }
                guard !widgets.kinds.isEmpty else { throw fail("widgets.kinds", "must name at least one widget kind") }
                for (i, kind) in widgets.kinds.enumerated() {
                    do throws(MessageValidationError) { try MessageKey.requireWidgetKind(kind) } catch {
                        throw fail("widgets.kinds[\(i)]", "\(error.problem) (as the app registers it with token-registry)")
                    }
                }
                guard Set(widgets.kinds).count == widgets.kinds.count else { throw fail("widgets.kinds", "names a kind twice") }
                for (i, state) in (widgets.states ?? []).enumerated() where raw.states[state] == nil {
                    throw fail("widgets.states[\(i)]", "\(state) is not one of the states")
                }
                if widgets.states?.isEmpty == true { throw fail("widgets.states", "must name a state, or be left out (every change of state)") }
                return ActivityTemplate.WidgetRefresh(kinds: widgets.kinds, states: widgets.states.map(Set.init))
            }
            // Attributes without a default are required: a push-to-start must say them.
            let attributes = try (raw.attributes ?? []).enumerated().map { i, field in
                var field = field
                if field.default == nil && field.optional != true { field.required = true }
                return try compile(field, at: "attributes[\(i)]")
            }
            let contentState = try raw.contentState.enumerated().map { i, field in try compile(field, at: "contentState[\(i)]") }
            var seen: Set<String> = []
            for (i, field) in contentState.enumerated() where !seen.insert(field.name).inserted {
                throw fail("contentState[\(i)].name", "\(field.name) appears twice")
            }
            guard !seen.contains("layout"), !seen.contains("links") else {
                throw fail("contentState", "layout and links are added by the service; no field may take those names")
            }
            // Timers count to a date, or over a range of dates.
            let dates = Set(contentState.filter { $0.kind == .date || $0.kind == .dateRange }.map(\.name))
            let layout = try raw.layout.map { try compileLayout($0, attributesType: raw.attributesType, dates: dates) }
            let states = try compileStates(raw.states)
            return ActivityTemplate(
                attributesType: raw.attributesType, description: raw.description ?? "", app: raw.app, stateField: raw.stateField ?? "status",
                link: try mustache(raw.link, at: "link"), attributes: attributes, contentState: contentState, layout: layout, states: states,
                defaultState: raw.defaultState, broadcastStoragePolicy: raw.broadcast?.storagePolicy, widgets: widgets)
        }

        /// A region of the collapsed island (`minimal`, `compactLeading`, `compactTrailing`) has no
        /// element links: iOS opens the island's one widget URL wherever it is tapped (Hema: "only
        /// one widgetUrl is supported when the island is collapsed"), so such a link would never be
        /// opened, and its taps would be counted under the widget.
        func refuseElementLinks(_ components: [RawComponent], region: String, attributesType: String) throws {
            for (i, component) in components.enumerated() {
                for (j, element) in (component.richText ?? []).enumerated() {
                    guard let id = element.element else { continue }
                    throw fail(
                        "layout.\(region)[\(i)].richText[\(j)].element",
                        "\(attributesType): element \(id) cannot link in \(region): the collapsed island opens only its widget URL (links.\(region)), "
                            + "so put element links in expanded or lockScreen")
                }
            }
        }

        func alertText(_ raw: RawAlertText, at path: String) throws -> ActivityTemplate.AlertText {
            switch raw {
            case .text(let text):
                return .text(try mustache(text, at: path))
            case .localized(let key, let args):
                // The key names a string of the app's Localizable.strings: the phone localizes it.
                guard !key.isEmpty, key.utf8.count <= 100 else { throw fail(path + ".locKey", "must be 1 to 100 characters") }
                return .localized(key: key, args: try args.enumerated().map { i, arg in try mustache(arg, at: "\(path).locArgs[\(i)]") })
            }
        }

        func compile(_ raw: RawComponent, at path: String, dates: Set<String>) throws -> ActivityTemplate.Component {
            let accessibility = try raw.accessibility.map { try mustache($0, at: path + ".accessibility") }
            switch (raw.richText, raw.progressBar, raw.remoteImage) {
            case (let elements?, nil, nil):
                return .richText(
                    try elements.enumerated().map { i, e in try compile(e, at: "\(path).richText[\(i)]", dates: dates) }, accessibility: accessibility)
            case (nil, let bar?, nil):
                let points = bar.points ?? []
                guard points.allSatisfy({ (0...100).contains($0) }) else { throw fail(path + ".progressBar.points", "must be 0 to 100") }
                return .progressBar(position: try mustache(bar.position, at: path + ".progressBar.position"), points: points, accessibility: accessibility)
            case (nil, nil, let image?):
                return .remoteImage(url: try mustache(image.url, at: path + ".remoteImage.url"), accessibility: accessibility)
            default:
                throw fail(path, "must be exactly one of richText, progressBar, remoteImage")
            }
        }

        func compile(_ raw: RawElement, at path: String, dates: Set<String>) throws -> ActivityTemplate.RichTextElement {
            if let element = raw.element, !isTypeName(element) { throw fail(path + ".element", "must be an identifier") }
            switch (raw.text, raw.icon, raw.timer) {
            case (let text?, nil, nil):
                return .init(kind: .text(try mustache(text, at: path + ".text")), rank: raw.rank, element: raw.element)
            case (nil, let icon?, nil):
                return .init(kind: .icon(icon), rank: raw.rank, element: raw.element)
            case (nil, nil, let field?):
                guard dates.contains(field) else { throw fail(path + ".timer", "\(field) is not a date or dateRange field of the content state") }
                return .init(kind: .timer(field: field, countsDown: raw.countsDown ?? true), rank: raw.rank, element: raw.element)
            default:
                throw fail(path, "must be exactly one of text, icon, timer")
            }
        }

        func isTypeName(_ text: String) -> Bool {
            guard let first = text.unicodeScalars.first, first.properties.isAlphabetic || first == "_", text.count <= 100 else { return false }
            return text.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "_" }
        }
    }
}
