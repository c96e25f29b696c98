import Mustache

/// A text of a template (a state's text, a layout text, a link, an alert): Mustache, compiled once
/// when the template is loaded.
///
/// Most texts are plain words, variables and sections on one line (`Order {{orderId}}: {{state.text}}`,
/// `{{#courier.name}}Courier {{courier.name}}{{/courier.name}}`). Those are also kept as a list of
/// pieces, which renders by looking each variable up in the context directly: Mustache's renderer
/// finds every name through dynamic casts and reflection, which cost an event more than the rest
/// of its layout. The pieces give Mustache's output or step aside: a text with any other tag (a
/// comment, a partial, an unescaped variable), a section on a text of several lines (Mustache drops
/// a section tag's line when the tag stands alone on it), or a variable or section whose value is
/// not a string, a number or a boolean (a list, an object, a value reached through one that is not
/// an object) is rendered by Mustache. Tests hold the two to the same output.
public struct TemplateText: Sendable {
    /// The template as Mustache compiled it (plain text: nothing is HTML-escaped).
    let mustache: MustacheTemplate
    /// The text as literal pieces and variables, when it has no other tag.
    let pieces: [Piece]?

    enum Piece: Sendable, Equatable {
        case literal(String)
        /// A variable's name, split at its dots (`state.text`: `["state", "text"]`).
        case variable([String])
        /// `{{#name}}…{{/name}}` (`{{^name}}…{{/name}}` when inverted), and what is inside.
        indirect case section([String], inverted: Bool, [Piece])
    }

    /// - Throws: Mustache's error when the text is not a Mustache template.
    public init(_ text: String) throws {
        mustache = try MustacheTemplate(string: "{{% CONTENT_TYPE: TEXT}}" + text)
        pieces = Self.pieces(of: text)
    }

    /// The text rendered with `context` (`[String: Any]`, as ``ContentBuilder`` makes it).
    public func render(_ context: Any) -> String {
        guard let pieces, let root = context as? [String: Any] else { return mustache.render(context) }
        var out = ""
        guard Self.render(pieces, root, into: &out) else { return mustache.render(context) }
        return out
    }

    /// Appends `pieces` rendered; `false` when Mustache is to render the text instead.
    private static func render(_ pieces: [Piece], _ root: [String: Any], into out: inout String) -> Bool {
        for piece in pieces {
            switch piece {
            case .literal(let text): out += text
            case .variable(let path):
                guard let found = lookUp(path, in: root) else { return false }
                switch found {
                case nil: continue  // missing: nothing, as Mustache renders it
                case let text as String: out += text
                case let number as Int64: out += String(number)
                case let number as Int: out += String(number)
                case let flag as Bool: out += flag ? "true" : "false"
                default: return false
                }
            case .section(let path, let inverted, let inside):
                guard let found = lookUp(path, in: root) else { return false }
                // As Mustache: missing and false are false, every string and number true (a
                // string or number becomes the innermost context, where no name is found, so
                // names inside are looked up in the root as before). Lists and objects: Mustache.
                let shown: Bool
                switch found {
                case nil: shown = false
                case let flag as Bool: shown = flag
                case is String, is Int64, is Int: shown = true
                default: return false
                }
                if shown != inverted, !render(inside, root, into: &out) { return false }
            }
        }
        return true
    }

    /// The value at `path`: `.some(nil)` when it is missing, `nil` when it is reached through a
    /// value that is not an object (Mustache reflects on it).
    private static func lookUp(_ path: [String], in root: [String: Any]) -> Any?? {
        var value: Any? = root
        for name in path {
            guard let object = value as? [String: Any] else { return nil }
            value = object[name]
            if value == nil { return .some(nil) }
        }
        return .some(value)
    }

    /// The pieces of a text made of literal text, `{{name}}` / `{{a.b}}` variables and, on a text
    /// of one line, `{{#name}}`/`{{^name}}` … `{{/name}}` sections; `nil` for any other. Read by
    /// Characters, as Mustache's parser reads it (a brace that a combining mark follows is not a
    /// delimiter).
    static func pieces(of text: String) -> [Piece]? {
        let characters = Array(text)
        let oneLine = !characters.contains { $0.isNewline }
        // The pieces of the sections open, innermost last: (name, inverted, pieces before it).
        var open: [(path: [String], inverted: Bool, outer: [Piece])] = []
        var pieces: [Piece] = []
        var literal = ""
        var index = 0
        func isNameCharacter(_ character: Character) -> Bool {
            character.isASCII && (character.isLetter || character.isNumber || character == "_" || character == ".")
        }
        while index < characters.count {
            guard characters[index] == "{", index + 1 < characters.count, characters[index + 1] == "{" else {
                literal.append(characters[index])
                index += 1
                continue
            }
            var end = index + 2
            // A section's sigil, right after the braces (a text with a space after it goes to Mustache).
            let sigil = end < characters.count && "#^/".contains(characters[end]) ? characters[end] : nil
            if sigil != nil {
                guard oneLine else { return nil }
                end += 1
            } else {
                while end < characters.count, characters[end] == " " { end += 1 }
            }
            var name = ""
            while end < characters.count, isNameCharacter(characters[end]) {
                name.append(characters[end])
                end += 1
            }
            if sigil == nil { while end < characters.count, characters[end] == " " { end += 1 } }
            let path = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard end + 1 < characters.count, characters[end] == "}", characters[end + 1] == "}",
                !name.isEmpty, !path.contains(where: \.isEmpty)
            else { return nil }
            if !literal.isEmpty { pieces.append(.literal(literal)) }
            literal = ""
            switch sigil {
            case "#", "^":
                open.append((path, sigil == "^", pieces))
                pieces = []
            case "/":
                guard let section = open.popLast(), section.path == path else { return nil }
                pieces = section.outer + [.section(path, inverted: section.inverted, pieces)]
            default:
                pieces.append(.variable(path))
            }
            index = end + 2
        }
        guard open.isEmpty else { return nil }
        if !literal.isEmpty { pieces.append(.literal(literal)) }
        return pieces
    }
}
