import Crypto

/// A push token's fingerprint: the first 16 hex digits of the SHA-256 of its lowercase hex text.
///
/// Tokens are credentials (whoever has one can push to that lock screen), so logs, outcomes and
/// APIs carry this instead. It identifies a token well enough to correlate (an outcome with the
/// token it concerns) without revealing it.
public enum TokenFingerprint {
    public static func of(token: String) -> String {
        // The dispatcher takes one per push: an ASCII token (every real one) is lowercased byte by
        // byte and the digits written at once (``Hex``), without a String per digit.
        var token = token
        let digest = token.withUTF8 { utf8 -> SHA256.Digest in
            guard utf8.allSatisfy({ $0 < 0x80 }) else { return SHA256.hash(data: Array(String(decoding: utf8, as: UTF8.self).lowercased().utf8)) }
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: utf8.count) { lower in
                for (index, byte) in utf8.enumerated() {
                    lower[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
                }
                return SHA256.hash(data: UnsafeRawBufferPointer(lower))
            }
        }
        return digest.withUnsafeBytes { Hex.lowercase($0.prefix(8)) }
    }
}
