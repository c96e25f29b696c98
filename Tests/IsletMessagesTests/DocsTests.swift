import Foundation
import IsletMessages
import Testing

/// docs/topics.md is what other teams code against: it must say what the code does.
@Suite("docs/topics.md")
struct DocsTests {
    static let docsURL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()  // IsletMessagesTests
        .deletingLastPathComponent()  // Tests
        .deletingLastPathComponent()  // package root
        .appendingPathComponent("docs/topics.md")

    static func document() throws -> String {
        try String(contentsOf: docsURL, encoding: .utf8)
    }

    /// The lines of the `## ` section whose heading names the topic.
    static func section(for topic: IsletTopic) throws -> [Substring] {
        let lines = try document().split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(
            lines.firstIndex { $0.hasPrefix("## ") && $0.contains("`\(topic.name)`") }, "no section for \(topic.name)")
        let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        return Array(lines[start..<end])
    }

    /// The contents of the ```json blocks in the lines.
    static func jsonBlocks(in lines: [Substring]) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in lines {
            if current == nil, line.trimmingCharacters(in: .whitespaces) == "```json" {
                current = []
            } else if current != nil, line.trimmingCharacters(in: .whitespaces) == "```" {
                blocks.append(current!.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    /// The field table: first cell (a `code` path) to third cell (required?).
    static func fieldRows(in lines: [Substring]) -> [(path: String, required: String)] {
        lines.compactMap { line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            // "| `path` | type | required | meaning |" splits into ["", path, type, required, meaning, ""].
            guard cells.count >= 6, cells[1].hasPrefix("`"), cells[1].hasSuffix("`"), cells[1].count > 2 else { return nil }
            return (String(cells[1].dropFirst().dropLast()), cells[3])
        }
    }

    static func schema(of topic: IsletTopic) throws -> MessageSchema {
        try #require(MessageSchema.all.first { $0.topic == topic })
    }

    @Test func overviewTableListsEveryTopic() throws {
        let lines = try Self.document().split(separator: "\n")
        for topic in IsletTopics.all {
            #expect(lines.contains { $0.hasPrefix("| `\(topic.name)` |") }, "\(topic.name)")
        }
    }

    @Test("each topic's section states its key rule, cleanup and retention", arguments: IsletTopics.all)
    func keyAndRetention(_ topic: IsletTopic) throws {
        let text = try Self.section(for: topic).joined(separator: "\n")
        #expect(text.contains(topic.keyRule), "key rule of \(topic.name)")
        for (name, value) in topic.configs {
            #expect(text.contains("`\(name)=\(value)`"), "\(name) of \(topic.name)")
        }
        if let retention = topic.retention {
            let days = retention.components.seconds / 86_400
            #expect(text.contains("\(days) days"), "retention of \(topic.name)")
        } else {
            #expect(text.contains("compacted"))
        }
        #expect(text.contains("`\(try Self.schema(of: topic).typeName)`"))
    }

    /// Every example in a topic's section is one of its type's golden files, and the main one is there.
    @Test("each topic's section shows its golden examples", arguments: IsletTopics.all)
    func examples(_ topic: IsletTopic) throws {
        let schema = try Self.schema(of: topic)
        let blocks = Self.jsonBlocks(in: try Self.section(for: topic))
        try #require(!blocks.isEmpty, "no ```json block for \(topic.name)")
        let goldens = try Dictionary(uniqueKeysWithValues: schema.goldens.map { ($0.name, try $0.json) })
        var shown = Set<String>()
        for block in blocks {
            let json = try IsletJSON.decodeValue(JSONValue.self, from: Array(block.utf8))
            let match = goldens.first { $0.value == json }?.key
            #expect(match != nil, "a \(topic.name) example is not a golden file:\n\(block)")
            if let match { shown.insert(match) }
        }
        #expect(shown.contains(schema.typeName), "\(schema.typeName).json is not shown")
    }

    /// The field table lists every field (no more) and says which are required, as the decoder does.
    @Test("each topic's section has the type's field table", arguments: IsletTopics.all)
    func fieldTable(_ topic: IsletTopic) throws {
        let schema = try Self.schema(of: topic)
        let rows = Self.fieldRows(in: try Self.section(for: topic))
        var fields = Set<String>()
        for golden in schema.goldens {
            fields.formUnion(try golden.json.memberPaths(freeForm: schema.freeForm))
        }
        #expect(rows.map(\.path).sorted() == fields.sorted(), "\(topic.name)")
        #expect(Set(rows.map(\.path)).count == rows.count, "a field is listed twice")
        for row in rows {
            let required = row.required.hasPrefix("yes")
            #expect(required || row.required.hasPrefix("no"), "\(row.path): say yes or no")
            #expect(required == schema.required.contains(row.path), "\(topic.name) \(row.path) required column")
        }
    }
}
