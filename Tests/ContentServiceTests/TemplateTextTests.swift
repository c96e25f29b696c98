import IsletMessages
import Mustache
import Testing
@testable import ContentService

@Suite("Template texts: compiled pieces render what Mustache renders")
struct TemplateTextTests {
    @Test("a text of words and variables is kept as pieces; one with any other tag is left to Mustache")
    func pieces() {
        #expect(TemplateText.pieces(of: "Order {{orderId}}: {{ state.text }}") == [
            .literal("Order "), .variable(["orderId"]), .literal(": "), .variable(["state", "text"]),
        ])
        #expect(TemplateText.pieces(of: "no tags { at } all }}") == [.literal("no tags { at } all }}")])
        #expect(TemplateText.pieces(of: "") == [])
        #expect(TemplateText.pieces(of: "{{#courier.name}}Courier {{courier.name}}{{/courier.name}}") == [
            .section(["courier", "name"], inverted: false, [.literal("Courier "), .variable(["courier", "name"])]),
        ])
        #expect(TemplateText.pieces(of: "a{{^b}}none{{#c}}{{c}}{{/c}}{{/b}}z") == [
            .literal("a"), .section(["b"], inverted: true, [.literal("none"), .section(["c"], inverted: false, [.variable(["c"])])]), .literal("z"),
        ])
        for other in [
            "{{{a}}}", "{{&a}}", "{{! a comment }}", "{{>partial}}", "{{a..b}}", "{{.a}}", "{{a.}}", "{{uppercase(a)}}", "{{a-b}}", "{{\ta}}",
            "{{a", "{{}}", "{{#a}}open", "{{/a}}", "{{#a}}{{/b}}", "{{#a}}{{#b}}{{/a}}{{/b}}", "{{# a}}x{{/a}}", "{{#a }}x{{/a}}",
            "{{#a}}\n{{/a}}", "line\n{{^a}}x{{/a}}", "{{#.}}x{{/.}}", "{{=<% %>=}}",
        ] {
            #expect(TemplateText.pieces(of: other) == nil, "\(other)")
        }
        // A brace that a combining mark follows is another character: no delimiter, for Mustache too.
        #expect(TemplateText.pieces(of: "{\u{301}{a}}") == [.literal("{\u{301}{a}}")])
    }

    static let words = ["Order ", "é漢字😀 ", "{", "}", "}}", " ", "\u{301}", "\u{600}", "a\nb", "\"&<>", "Tom & Jerry", "{{", "\u{200D}"]
    static let tags = [
        "{{a}}", "{{ a }}", "{{n}}", "{{flag}}", "{{s.x}}", "{{o.x}}", "{{o.y.z}}", "{{o.missing}}", "{{missing}}", "{{list}}", "{{o}}",
        "{{#a}}[{{a}}]{{/a}}", "{{^missing}}none{{/missing}}", "{{{a}}}", "{{! c }}", "{{n.x}}", "{{zero}}", "{{empty}}", "{{no}}",
        // Sections of every kind of value, whole or as loose tags that nest (or do not match) at random.
        "{{#o}}{{x}}{{/o}}", "{{#list}}<{{.}}>{{/list}}", "{{^flag}}not{{/flag}}", "{{#empty}}e{{/empty}}", "{{#no}}no{{/no}}",
        "{{#zero}}z{{a}}{{/zero}}", "{{#o.x}}{{o.x}}{{/o.x}}", "{{^o.y.z}}-{{/o.y.z}}", "{{#s.x}}s{{/s.x}}", "{{^list}}none{{/list}}",
        "{{#a}}", "{{/a}}", "{{#n}}", "{{/n}}", "{{^missing}}", "{{/missing}}", "{{#flag}}", "{{/flag}}", "{{^no}}", "{{/no}}",
    ]
    static var contexts: [[String: Any]] { [
        ["a": "Ana", "n": Int64(42), "flag": true, "no": false, "s": "text", "zero": Int64(0), "empty": "",
         "o": ["x": "inner", "y": ["z": Int64(-7)] as [String: Any]] as [String: Any], "list": ["x", "y"] as [Any]],
        ["a": "{{a}}", "o": "not an object", "n": "42"],
        [:],
    ] }

    @Test("random texts of words and tags, in contexts of every kind of value: the same output as Mustache's")
    func sameAsMustache() throws {
        var compiled = 0
        for _ in 0..<3_000 {
            var text = ""
            for _ in 0..<Int.random(in: 0...6) { text += Bool.random() ? Self.words.randomElement()! : Self.tags.randomElement()! }
            guard let template = try? TemplateText(text) else { continue }
            if template.pieces != nil { compiled += 1 }
            for context in Self.contexts {
                #expect(template.render(context) == template.mustache.render(context), "\(text.debugDescription) in \(context)")
            }
        }
        #expect(compiled > 300, "the fast form was tried")
    }

    @Test("every text of the example templates, in every language, renders as Mustache renders it, with the fields of each golden event")
    func examples() throws {
        let templates = try TemplateLoader.load(directory: templatesDirectory)
        var compiled = 0
        for (type, events) in GoldenPayloadTests.scenarios {
            let template = try #require(templates[type])
            for localized in [template] + template.languages.keys.sorted().map({ template.localized($0) }) {
                let builder = ContentBuilder(template: localized)
                for text in localized.texts {
                    if text.pieces != nil { compiled += 1 }
                    for event in events {
                        let context = builder.context(fields: event.fields, state: builder.state(of: event.fields))
                        #expect(text.render(context) == text.mustache.render(context))
                    }
                }
            }
        }
        #expect(compiled > 20, "most texts are words and variables")
    }
}

extension ActivityTemplate {
    /// Every text of the template.
    var texts: [TemplateText] {
        var texts = [link] + (attributes + contentState).compactMap(\.template)
        func add(_ alert: AlertText) {
            switch alert {
            case .text(let text): texts.append(text)
            case .localized(_, let args): texts += args
            }
        }
        for state in states.values {
            if let text = state.text { texts.append(text) }
            if let alert = state.alert { add(alert.title); add(alert.body) }
        }
        for component in layout?.allComponents ?? [] {
            switch component {
            case .richText(let elements, let accessibility):
                texts += elements.compactMap { if case .text(let text) = $0.kind { text } else { nil } } + [accessibility].compactMap { $0 }
            case .progressBar(let position, _, let accessibility): texts += [position] + [accessibility].compactMap { $0 }
            case .remoteImage(let url, let accessibility): texts += [url] + [accessibility].compactMap { $0 }
            }
        }
        return texts
    }
}
