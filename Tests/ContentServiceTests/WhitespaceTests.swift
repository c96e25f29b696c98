import Foundation
import Testing
@testable import ContentService

@Suite("The layout renderer's whitespace helpers agree with Foundation")
struct WhitespaceTests {
    /// Strings built from pieces that matter: ASCII spaces and tabs, other ASCII, newlines (not
    /// in `.whitespaces`), non-breaking and ideographic spaces (in it), accented and combining
    /// characters, emoji.
    static let pieces = [" ", "\t", "a", "7", "-", "\n", "\r\n", "\u{00A0}", "\u{3000}", "\u{2009}", "é", "e\u{301}", "🚚", "\u{200B}"]

    @Test("isBlank and trimmedOfWhitespace, on 20,000 generated strings")
    func agreeWithFoundation() {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let text = (0..<Int.random(in: 0...6, using: &random)).map { _ in Self.pieces.randomElement(using: &random) ?? "" }.joined()
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            #expect(text.isBlank == trimmed.isEmpty, "\(Array(text.unicodeScalars))")
            #expect(text.trimmedOfWhitespace == trimmed, "\(Array(text.unicodeScalars))")
        }
    }
}
