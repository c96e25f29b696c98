import Foundation
import IsletMessages
import Testing
@testable import AnalyticsIngest

/// A tap's body is read by ``JSONReader`` where it is sure to give what the decoder gives.
@Suite("analytics-ingest: tap bodies read without JSONDecoder, as JSONDecoder reads them")
struct TapReadingTests {
    @Test("2,000 random bodies (fields present, absent, null or of another kind; single taps and batches): where the reader answers, the decoder's value")
    func sameAsTheDecoder() throws {
        let values: [String] = [
            "\"fooddelivery://order/42?isl_a=order-42\"", "\"2026-11-22T10:15:30.123Z\"", "\"5.2.0\"", "\"é漢字😀\\n\\u00e9\"", "null", "1", "true", "{}", "[]", "\"\"",
        ]
        var answered = 0
        for _ in 0..<2_000 {
            func tap() -> String {
                let members = ["url", "tappedAt", "appVersion", "osVersion", "other"].filter { _ in Bool.random() }.map { "\"\($0)\":\(values.randomElement()!)" }
                return "{" + members.joined(separator: ",") + "}"
            }
            let single = Array(tap().utf8)
            let batch = Array(("{\"taps\":[" + (0..<Int.random(in: 0...3)).map { _ in Bool.random() ? tap() : values.randomElement()! }.joined(separator: ",") + "]}").utf8)
            if let read = JSONReader.value(of: single).flatMap(TapInput.init(json:)) {
                answered += 1
                #expect(try IsletJSON.decodeWithDecoder(TapInput.self, from: single) == read, "\(String(decoding: single, as: UTF8.self))")
            } else {
                #expect(throws: MessageDecodingError.self, "\(String(decoding: single, as: UTF8.self))") { try IsletJSON.decodeWithDecoder(TapInput.self, from: single) }
            }
            if let read = JSONReader.value(of: batch).flatMap(TapBatch.init(json:)) {
                #expect(try IsletJSON.decodeWithDecoder(TapBatch.self, from: batch) == read, "\(String(decoding: batch, as: UTF8.self))")
            }
        }
        #expect(answered > 100)
    }
}
