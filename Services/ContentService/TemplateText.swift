import Mustache

/// A text of a template (a state's text, a layout text, a link, an alert): Mustache, compiled once
/// when the template is loaded.
///
/// Most texts are plain words and variables (`Order {{orderId}}: {{state.text}}`). Those are also
/// kept as a list of pieces, which renders by looking each variable up in the context directly:
/// Mustache's renderer finds every name through dynamic casts and reflection, which cost an event
/// more than the rest of its layout. The pieces give Mustache's output or step aside: a text with
/// any other tag (a section, a comment, a partial), or a variable whose value is not a string, a
/// number or a boolean (a list, an object, a value reached through one that is not an object), is
/// rendered by Mustache. Tests hold the two to the same output.
public struct TemplateText: Sendable {
    /// The template as Mustache compiled it (plain text: nothing is HTML-escaped).
    let mustache: MustacheTemplate
    /// The text as literal pieces and variables, when it has no other tag.
    let pieces: [Piece]?

    enum Piece: Sendable, Equatable {
        case literal(String)
        /// A variable's name, split at its dots (`state.text`: `["state", "text"]`).
        case variable([String])
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
        for piece in pieces {
            switch piece {
            case .literal(let text): out += text
            case .variable(let path):
                var value: Any? = root
                for name in path {
                    // Reached through a value that is not an object: Mustache reflects on it.
                    guard let object = value as? [String: Any] else { return mustache.render(context) }
                    value = object[name]
                    if value == nil { break }
                }
                switch value {
                case nil: continue  // missing: nothing, as Mustache renders it
                case let text as String: out += text
                case let number as Int64: out += String(number)
                case let number as Int: out += String(number)
                case let flag as Bool: out += flag ? "true" : "false"
                default: return mustache.render(context)
                }
            }
        }
        return out
    }

    /// The pieces of a text made of literal text and `{{name}}` / `{{a.b}}` variables only;
    /// `nil` for any other. Read by Characters, as Mustache's parser reads it (a brace that a
    /// combining mark follows is not a delimiter).
    static func pieces(of text: String) -> [Piece]? {
        let characters = Array(text)
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
            while end < characters.count, characters[end] == " " { end += 1 }
            var name = ""
            while end < characters.count, isNameCharacter(characters[end]) {
                name.append(characters[end])
                end += 1
            }
            while end < characters.count, characters[end] == " " { end += 1 }
            let path = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard end + 1 < characters.count, characters[end] == "}", characters[end + 1] == "}",
                !name.isEmpty, !path.contains(where: \.isEmpty)
            else { return nil }
            if !literal.isEmpty { pieces.append(.literal(literal)) }
            literal = ""
            pieces.append(.variable(path))
            index = end + 2
        }
        if !literal.isEmpty { pieces.append(.literal(literal)) }
        return pieces
    }
}
