import Foundation
import IsletMessages
import Testing

/// ``JSONReader`` answers only when it gives what the decoder gives: every test here reads the same
/// text both ways.
@Suite("JSONReader: what JSONDecoder reads, or no answer")
struct JSONReaderTests {
    /// The reader's value, where it answers, is the decoder's; where the decoder fails, it does not answer.
    func agree(_ text: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        guard let read = JSONReader.value(of: text) else { return }
        let decoded = try? IsletJSON.decodeWithDecoder(JSONValue.self, from: text)
        #expect(decoded == read, "\(String(decoding: text, as: UTF8.self).debugDescription)", sourceLocation: sourceLocation)
    }

    @Test("edge cases: numbers, escapes, surrogates, duplicates, nesting, what is not JSON")
    func edges() {
        let answered = [
            "null", "true", "false", "0", "-0", "-1", "1e-2", "1.5", "0.1", "123456.789", "9223372036854775807",
            "-9223372036854775808", "\"\"", "\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"", "\"\\u0000\"", "[]", "{}", " [ 1 , {\"a\" : [ ] } ] ",
            "{\"a\":{\"b\":[{\"c\":null}]}}", "\"é漢字😀\"",
        ]
        for text in answered {
            #expect(JSONReader.value(of: Array(text.utf8)) != nil, "\(text)")
            agree(Array(text.utf8))
        }
        let left = [
            "", " ", "01", "1.", ".5", "+1", "1e", "--1", "1e400", "12.0", "1.2e1", "1E2", "-0.0", "[1,7.0]", "9223372036854775808", "12345678901234567890.0", "tru", "nul", "[1,]", "{\"a\":1,}",
            "{\"a\":1,\"a\":2}", "{a:1}", "\"\\ud83d\"", "\"\\ude00\"", "\"\\x\"", "\"a\nb\"", "\"open", "[1 2]", "{\"a\" 1}", "1 2",
            String(repeating: "[", count: 200) + String(repeating: "]", count: 200),
        ]
        for text in left {
            #expect(JSONReader.value(of: Array(text.utf8)) == nil, "\(text)")
        }
    }

    @Test("2,000 random values, written compactly and with whitespace and escapes: the decoder's values")
    func randomValues() {
        var rng = SystemRandomNumberGenerator()
        var answered = 0
        for _ in 0..<2_000 {
            let value = JSONWritingTests.random(&rng)
            let text = value.jsonBytes
            if let read = JSONReader.value(of: text) {
                #expect(read == (try? IsletJSON.decodeWithDecoder(JSONValue.self, from: text)), "\(String(decoding: text, as: UTF8.self))")
                answered += 1
            }
            // Spaced out, and every slash and non-ASCII character of its strings escaped.
            var spaced: [UInt8] = []
            var inString = false
            for byte in text {
                if byte == UInt8(ascii: "\"") && spaced.last != UInt8(ascii: "\\") { inString.toggle() }
                if !inString, [UInt8(ascii: ","), UInt8(ascii: ":"), UInt8(ascii: "[")].contains(byte) { spaced += Array(" \n\t\r".utf8).shuffled().prefix(2) }
                spaced.append(byte)
                if inString, byte == UInt8(ascii: "/") { spaced.insert(UInt8(ascii: "\\"), at: spaced.count - 1) }
            }
            agree(spaced)
        }
        #expect(answered > 1_000, "most random values are read")
    }

    static let event = ActivityEvent(
        eventId: "e-1", activityId: "order-42", kind: .update, attributesType: "DeliveryAttributes",
        fields: ["status": .string("out_for_delivery"), "progress": .number(40.5), "eta": .integer(12), "courier": .object(["name": .string("Ana")]),
                 "tags": .array([.string("a"), .null, .bool(true)])],
        urgency: .important, occurredAt: Date(timeIntervalSince1970: 1_795_000_000.123), sequence: 7,
        startTarget: .init(app: AppTarget(bundleId: "com.example.food", environment: .sandbox), deviceId: "d1"),
        attributes: ["orderId": .string("42")], source: "orders", bundleId: "com.example.food")

    @Test("an activity event read either way is the same event; a mutated one too, or the reader leaves it to the decoder")
    func activityEvents() throws {
        let text = try IsletJSON.encode(Self.event)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: text) == Self.event)
        #expect(JSONReader.value(of: text).flatMap(ActivityEvent.init(json:)) == Self.event)
        // Without its optionals, and with them null.
        var bare = Self.event
        (bare.bundleId, bare.startTarget, bare.attributes, bare.source) = (nil, nil, nil, nil)
        let bareText = try IsletJSON.encode(bare)
        #expect(JSONReader.value(of: bareText).flatMap(ActivityEvent.init(json:)) == bare)
        var nulls = String(decoding: bareText, as: UTF8.self)
        nulls.removeLast()
        nulls += ",\"bundleId\":null,\"startTarget\":null,\"attributes\":null,\"source\":null}"
        #expect(JSONReader.value(of: Array(nulls.utf8)).flatMap(ActivityEvent.init(json:)) == bare)

        // Mutations: a byte changed, dropped or put in. Where the reader makes an event, the decoder makes the same.
        let tokens = Array("{}[]\",:0123456789.eE-+ntfu\\ aé".utf8)
        var rng = SystemRandomNumberGenerator()
        var readerAnswered = 0
        for _ in 0..<4_000 {
            var mutated = text
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = Int.random(in: 0..<mutated.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: mutated[at] = tokens.randomElement(using: &rng)!
                case 1: mutated.remove(at: at)
                default: mutated.insert(tokens.randomElement(using: &rng)!, at: at)
                }
            }
            guard String(validating: mutated, as: UTF8.self) != nil, let event = JSONReader.value(of: mutated).flatMap(ActivityEvent.init(json:)) else { continue }
            readerAnswered += 1
            #expect(try IsletJSON.decodeWithDecoder(ActivityEvent.self, from: mutated) == event, "\(String(decoding: mutated, as: UTF8.self))")
        }
        #expect(readerAnswered > 100, "the reader was tried on mutated events")
    }

    @Test("a field of the wrong kind, a required one missing, a bad date: the reader leaves it, and the decoder's error names the field")
    func refusals() throws {
        let text = String(decoding: try IsletJSON.encode(Self.event), as: UTF8.self)
        for (from, to, field) in [
            ("\"sequence\":7", "\"sequence\":\"7\"", "sequence"),
            ("\"eventId\":\"e-1\",", "", "eventId"), ("2026", "20x6", "occurredAt"), ("\"source\":\"orders\"", "\"source\":1", "source"),
            ("\"deviceId\":\"d1\"", "\"deviceId\":7", "startTarget.deviceId"),
        ] {
            let changed = Array(text.replacingOccurrences(of: from, with: to).utf8)
            #expect(JSONReader.value(of: changed).flatMap(ActivityEvent.init(json:)) == nil, "\(field)")
            let error = #expect(throws: MessageDecodingError.self) { try IsletJSON.decode(ActivityEvent.self, from: changed) }
            #expect(error?.path == field, "\(String(describing: error))")
        }
        // A fraction where a whole number belongs: the reader leaves it (the decoder refuses it);
        // a whole number written with a fraction or an exponent too (the decoder decides).
        let fraction = Array(text.replacingOccurrences(of: "\"sequence\":7", with: "\"sequence\":7.5").utf8)
        #expect(JSONReader.value(of: fraction).flatMap(ActivityEvent.init(json:)) == nil)
        #expect(throws: MessageDecodingError.self) { try IsletJSON.decode(ActivityEvent.self, from: fraction) }
        for whole in ["7.0", "7e0", "70e-1"] {
            let written = Array(text.replacingOccurrences(of: "\"sequence\":7", with: "\"sequence\":\(whole)").utf8)
            #expect(JSONReader.value(of: written) == nil, "\(whole)")
        }
    }

    @Test("2,000 random push requests (awkward strings, each optional present or not) read either way are the same request")
    func pushRequests() throws {
        for _ in 0..<2_000 {
            let request = OwnWriterTests.randomRequest()
            let text = try IsletJSON.encode(request)
            let decoded = try IsletJSON.decodeWithDecoder(PushRequest.self, from: text)
            #expect(JSONReader.value(of: text).flatMap(PushRequest.init(json:)) == decoded, "\(request)")
        }
    }
}
