import Crypto
import Testing
@testable import IsletMessages

@Suite("A token's fingerprint")
struct TokenFingerprintTests {
    @Test("the first 16 hex digits of the SHA-256 of the lowercase token (values from Python's hashlib)")
    func knownValues() {
        #expect(TokenFingerprint.of(token: String(repeating: "00", count: 32)) == "60e05bd1b195af2f")
        #expect(TokenFingerprint.of(token: String(repeating: "AbCdEf0123456789", count: 4)) == "aa23e893b52d03b0")
        #expect(TokenFingerprint.of(token: String(repeating: "abcdef0123456789", count: 4)) == "aa23e893b52d03b0", "case does not matter")
        #expect(TokenFingerprint.of(token: "ÄBC-Token") == "422530c5886d5ecd", "a text that is not ASCII is lowercased as Unicode")
        #expect(TokenFingerprint.of(token: "") == "e3b0c44298fc1c14")
    }

    @Test("the same as the plain formula (lowercased, hashed, the digits written one by one) for 2,000 random tokens")
    func randomTokens() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789abcdefABCDEF-é")
        for _ in 0..<2_000 {
            let token = String((0..<Int.random(in: 0...100, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! })
            let digest = SHA256.hash(data: Array(token.lowercased().utf8))
            let plain = digest.prefix(8).map { String($0 >> 4, radix: 16) + String($0 & 0xF, radix: 16) }.joined()
            #expect(TokenFingerprint.of(token: token) == plain, "\(token)")
        }
    }
}

@Suite("JSON text is UTF-8 without a NUL byte")
struct UTF8TextTests {
    @Test("eight bytes at a time gives what a byte-by-byte check gives, for 5,000 random byte strings (a NUL or a high byte anywhere, any length)")
    func againstBytes() {
        var generator = SystemRandomNumberGenerator()
        let samples: [[UInt8]] = [[], [0], Array("{\"a\":1}".utf8), Array("é".utf8), [0xC3], Array(repeating: 0x41, count: 8) + [0], [0x80] + Array(repeating: 0x41, count: 15)]
        for sample in samples { #expect(IsletJSON.isUTF8Text(sample) == plain(sample), "\(sample)") }
        let pieces: [[UInt8]] = [[0], [0xC3, 0xA9], [0xC3], [0xE2, 0x82, 0xAC], [0xFF], [0x01], [0x7F], [0x80]]
        for _ in 0..<5_000 {
            var bytes = Array("{\"k\":\"abcdefgh\"}".utf8).shuffled(using: &generator).prefix(Int.random(in: 0...16, using: &generator)).map { $0 }
            for _ in 0..<Int.random(in: 0...2, using: &generator) {
                bytes.insert(contentsOf: pieces.randomElement(using: &generator)!, at: Int.random(in: 0...bytes.count, using: &generator))
            }
            bytes += Array(repeating: UInt8(ascii: "x"), count: Int.random(in: 0...9, using: &generator))
            #expect(IsletJSON.isUTF8Text(bytes) == plain(bytes), "\(bytes)")
        }
    }

    private func plain(_ bytes: [UInt8]) -> Bool {
        !bytes.contains(0) && String(validating: bytes, as: UTF8.self) != nil
    }
}
