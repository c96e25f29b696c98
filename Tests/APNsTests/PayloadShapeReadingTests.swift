import Foundation
import IsletMessages
import Testing
@testable import APNsSimulator

/// The simulator reads each payload's `aps` by ``JSONReader`` where it is sure to give what the decoder gives.
@Suite("APNs simulator: a payload's aps read without JSONDecoder, as JSONDecoder reads it")
struct PayloadShapeReadingTests {
    @Test("3,000 random payloads (each aps field present, absent, null or of another kind): where the reader answers, the decoder's reading")
    func sameAsTheDecoder() throws {
        let values = [
            "\"update\"", "\"start\"", "1795000000", "1795000000.0", "1.5", "-3", "1e3", "null", "true", "{}", "{\"a\":[1,{}]}", "[]", "\"\"",
            "\"DeliveryAttributes\"",
        ]
        let keys = ["event", "timestamp", "content-state", "attributes", "attributes-type", "alert", "input-push-channel", "other"]
        var answered = 0
        for _ in 0..<3_000 {
            let aps = "{" + keys.filter { _ in Bool.random() }.map { "\"\($0)\":\(values.randomElement()!)" }.joined(separator: ",") + "}"
            let text = Array((Int.random(in: 0..<10) == 0 ? values.randomElement()! : "{\"aps\":\(Int.random(in: 0..<10) == 0 ? values.randomElement()! : aps)}").utf8)
            let decoded = try? IsletJSON.decodeWithDecoder(NotificationValidator.PayloadShape.self, from: text)
            if let read = JSONReader.value(of: text).flatMap(NotificationValidator.PayloadShape.init(json:)) {
                answered += 1
                #expect(decoded == read, "\(String(decoding: text, as: UTF8.self))")
            } else if !(String(decoding: text, as: UTF8.self).contains(".0") || String(decoding: text, as: UTF8.self).contains("1e3")) {
                // Refused where the decoder refuses, but for a whole number written with a fraction
                // or an exponent, which the reader leaves to the decoder.
                #expect(decoded == nil, "\(String(decoding: text, as: UTF8.self))")
            }
        }
        #expect(answered > 1_000)
    }
}
