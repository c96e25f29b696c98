import Foundation
import IsletMessages
import Testing

/// The golden files are the wire contract: each one must decode to its Swift value, and that value
/// must encode to exactly the file's text.
@Suite("Golden files")
struct GoldenTests {
    @Test("decoding the file gives the expected value", arguments: GoldenCase.all)
    func decodes(_ golden: GoldenCase) throws {
        let decoded = try golden.decode(Array(golden.text.utf8))
        #expect(golden.isExpected(decoded), "decoded \(decoded)\nexpected \(golden.expected)")
    }

    @Test("encoding the value gives the file's text", arguments: GoldenCase.all)
    func encodes(_ golden: GoldenCase) throws {
        let encoded = try IsletJSON.encodePretty(golden.expected)
        let file = try golden.text
        #expect(encoded == file.trimmingSuffix("\n"), "Golden/\(golden.name).json should be:\n\(encoded)")
    }

    @Test("compact encoding decodes to the same value", arguments: GoldenCase.all)
    func compactRoundTrip(_ golden: GoldenCase) throws {
        let bytes = try IsletJSON.encode(golden.expected)
        #expect(!bytes.contains(UInt8(ascii: "\n")))
        #expect(golden.isExpected(try golden.decode(bytes)))
    }

    @Test("every golden is a valid message", arguments: GoldenCase.all)
    func valid(_ golden: GoldenCase) throws {
        try golden.expected.validate()
        #expect(golden.expected.schemaVersion == 1)
    }

    @Test func everyGoldenFileIsTested() throws {
        #expect(try Golden.names() == GoldenCase.all.map(\.name).sorted())
    }

    @Test func everyMessageTypeHasAMainGolden() {
        #expect(Set(GoldenCase.main.map(\.name)) == Set(MessageSchema.all.map(\.typeName)))
        #expect(GoldenCase.main.count == IsletTopics.all.count)
    }
}

extension String {
    func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
