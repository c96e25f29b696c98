import Foundation
import IsletMessages
import Testing

@Suite("JSONValue's own writer")
struct JSONWritingTests {
    /// A random JSON value: every kind, awkward strings and numbers, nesting.
    static func random(_ rng: inout some RandomNumberGenerator, depth: Int = 0) -> JSONValue {
        let strings = ["", "plain", "a\"b\\c/d", "line\nbreak\r\ttab", "\u{0}\u{1}\u{8}\u{c}\u{1f}\u{7f}", "é漢字😀", "\u{2028}"]
        let numbers: [Double] = [0.1, 3.4, -2.5, 1e-7, 1e21, 100, -0.0, 123456.789, 1.5e300, 2.5e-5, 9_007_199_254_740_992]
        switch Int.random(in: 0..<(depth > 3 ? 5 : 7), using: &rng) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &rng))
        case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &rng))
        case 3: return .number(numbers.randomElement(using: &rng)! * Double(Int.random(in: 1...9, using: &rng)))
        case 4: return .string(strings.randomElement(using: &rng)! + String(Int.random(in: 0...99, using: &rng)))
        case 5: return .array((0..<Int.random(in: 0...4, using: &rng)).map { _ in random(&rng, depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &rng) { members[strings.randomElement(using: &rng)! + "k"] = random(&rng, depth: depth + 1) }
            return .object(members)
        }
    }

    @Test("writes exactly what IsletJSON's encoder writes, for 2,000 random values")
    func sameBytesAsTheEncoder() throws {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let value = Self.random(&rng)
            #expect(value.jsonBytes == (try IsletJSON.encode(value)), "\(value)")
        }
    }

    @Test("reading JSON text (kinds tried likeliest first) gives what the general order gives, for 2,000 random values and edge cases")
    func jsonTextOrderAgrees() throws {
        let general = JSONDecoder()  // no JSONValue.fromJSONText: the order for any decoder
        var texts: [[UInt8]] = [
            "null", "true", "false", "0", "-1", "12.0", "1.2e1", "1.5", "9223372036854775807", "9223372036854775808", "-0.0", "\"\"",
            "\"true\"", "\"12\"", "[]", "{}", "[null,true,1,1.5,\"s\",[],{}]", "{\"a\":{\"b\":[{\"c\":null}]}}",
        ].map { Array($0.utf8) }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 { texts.append(Self.random(&rng).jsonBytes) }
        for text in texts {
            let expected = try general.decode(JSONValue.self, from: Data(text))
            #expect(try IsletJSON.decodeValue(JSONValue.self, from: text) == expected, "\(String(decoding: text, as: UTF8.self))")
        }
        // What is not a JSON value fails either way.
        for text in ["1e400", "{\"a\":1e400}", "[1,1e400]"] {
            #expect(throws: (any Error).self) { try general.decode(JSONValue.self, from: Data(text.utf8)) }
            #expect(throws: MessageDecodingError.self) { try IsletJSON.decodeValue(JSONValue.self, from: Array(text.utf8)) }
        }
    }

    @Test("what it writes reads back as the same value")
    func roundTrip() throws {
        let value: JSONValue = .object(["aps": .object(["timestamp": .integer(1_795_000_000), "relevance-score": .number(40.5), "event": .string("update")])])
        #expect(try IsletJSON.decodeValue(JSONValue.self, from: value.jsonBytes) == value)
    }
}

@Suite("Messages that write their own JSON")
struct OwnWriterTests {
    static let awkward = ["", "plain", "a\"b\\c/d", "line\nbreak\r\ttab", "\u{0}\u{1}\u{8}\u{c}\u{1f}\u{7f}", "é漢字😀", "\u{2028}", "order-42"]

    /// A click with awkward strings, with and without its app, at dates across the years Islet writes.
    static func randomClick() -> ClickEvent {
        let text = { awkward.randomElement()! }
        let date = { Date(timeIntervalSince1970: Double(Int64.random(in: -62_167_219_200_000...253_402_300_799_999)) / 1_000) }
        let app = AppTarget(bundleId: text(), environment: Bool.random() ? .production : APNsEnvironment(rawValue: text()))
        return ClickEvent(
            clickId: text(), activityId: text(), attributesType: text(), surface: Bool.random() ? .lockScreen : Surface(rawValue: text()),
            element: text(), contentSequence: Int64.random(in: Int64.min...Int64.max), app: Bool.random() ? app : nil,
            appVersion: text(), osVersion: text(), keyId: text(), issuedAt: date(), tappedAt: date(), receivedAt: date(),
            schemaVersion: Int.random(in: -5...5))
    }

    @Test("a ClickEvent's writer gives the encoder's bytes, for 2,000 random clicks")
    func clickEventSameBytes() throws {
        for _ in 0..<2_000 {
            let click = Self.randomClick()
            #expect(try IsletJSON.encode(click) == (try IsletJSON.encodeWithEncoder(click)), "\(click)")
        }
    }

    /// A push request with awkward strings (a payload among them), each optional present or not.
    static func randomRequest() -> PushRequest {
        let text = { awkward.randomElement()! }
        let maybe = { Bool.random() ? text() : nil }
        let date = { Date(timeIntervalSince1970: Double(Int64.random(in: -62_167_219_200_000...253_402_300_799_999)) / 1_000) }
        let maybeDate = { Bool.random() ? date() : nil }
        return PushRequest(
            requestId: text(), activityId: maybe(), pushToStartKey: maybe(), event: ActivityEventKind(rawValue: text()),
            app: AppTarget(bundleId: text(), environment: .sandbox), attributesType: text(),
            payload: #"{"aps":{"content-state":{"text":"\#(awkward.randomElement()!)"}}}"# + text(), priority: Int.random(in: -20...20),
            urgency: Bool.random() ? .critical : Urgency(rawValue: text()), supersedable: Bool.random(), alerting: Bool.random(),
            apnsTimestamp: Int64.random(in: Int64.min...Int64.max), contentSequence: Int64.random(in: Int64.min...Int64.max),
            staleDate: maybeDate(), expiration: maybeDate(), createdAt: date(), sourceEventId: maybe(), sourceActivityId: maybe(),
            state: maybe(), channelStoragePolicy: Bool.random() ? Int.random(in: -3...3) : nil, tokenRegisteredAt: maybeDate(),
            schemaVersion: Int.random(in: -5...5))
    }

    @Test("a PushRequest's writer gives the encoder's bytes, for 2,000 random requests")
    func pushRequestSameBytes() throws {
        for _ in 0..<2_000 {
            let request = Self.randomRequest()
            #expect(try IsletJSON.encode(request) == (try IsletJSON.encodeWithEncoder(request)), "\(request)")
        }
    }

    /// A latency as the dispatcher computes one (milliseconds with a fraction), or a number of any
    /// magnitude and form: whole, tiny, huge, negative zero.
    static func randomLatency() -> Double {
        switch Int.random(in: 0..<4) {
        case 0: Double.random(in: 0..<100_000)
        case 1: Double(Int.random(in: 0..<1_000_000))
        case 2: Double(sign: .plus, exponent: Int.random(in: -1_000...1_000), significand: Double.random(in: 1..<2))
        default: [0, -0.0, 1e-7, 1e16, 1e21, 123_456_789_012_345_678, 0.1, 5e-324, Double.greatestFiniteMagnitude].randomElement()!
        }
    }

    /// An outcome with awkward strings, each optional present or not, its answer with or without a reason and a timestamp.
    static func randomOutcome() -> PushOutcome {
        let text = { awkward.randomElement()! }
        let maybe = { Bool.random() ? text() : nil }
        let date = { Date(timeIntervalSince1970: Double(Int64.random(in: -62_167_219_200_000...253_402_300_799_999)) / 1_000) }
        let apns = PushOutcome.APNsResponse(
            status: Int.random(in: -1_000...1_000), reason: maybe(), apnsId: maybe(), timestamp: Bool.random() ? date() : nil)
        return PushOutcome(
            requestId: text(), activityId: maybe(), pushToStartKey: maybe(), result: Bool.random() ? .delivered : PushResult(rawValue: text()),
            apns: Bool.random() ? apns : nil, priorityUsed: Bool.random() ? Int.random(in: -20...20) : nil, attempts: Int.random(in: -5...Int.max),
            latencyMilliseconds: Bool.random() ? randomLatency() : nil, tokenFingerprint: maybe(), supersededBy: maybe(), detail: maybe(),
            completedAt: date(), bundleId: maybe(), attributesType: maybe(), channelId: maybe(),
            contentSequence: Bool.random() ? Int64.random(in: Int64.min...Int64.max) : nil, announcementId: maybe(),
            schemaVersion: Int.random(in: -5...5))
    }

    @Test("a PushOutcome's writer gives the encoder's bytes, for 2,000 random outcomes (latencies of every magnitude among them)")
    func pushOutcomeSameBytes() throws {
        for _ in 0..<2_000 {
            let outcome = Self.randomOutcome()
            #expect(try IsletJSON.encode(outcome) == (try IsletJSON.encodeWithEncoder(outcome)), "\(outcome)")
        }
    }

    @Test("an AppTarget's writer gives the encoder's bytes")
    func appTargetSameBytes() throws {
        for bundleId in Self.awkward {
            let app = AppTarget(bundleId: bundleId, environment: .sandbox)
            #expect(try IsletJSON.encode(app) == (try IsletJSON.encodeWithEncoder(app)))
        }
    }
}
