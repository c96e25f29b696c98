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
        let ascii = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: token.utf8.count) { lower -> SHA256.Digest? in
            for (index, byte) in token.utf8.enumerated() {
                guard byte < 0x80 else { return nil }
                lower[index] = byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
            }
            return SHA256.hash(data: UnsafeRawBufferPointer(lower))
        }
        let digest = ascii ?? SHA256.hash(data: Array(token.lowercased().utf8))
        return digest.withUnsafeBytes { Hex.lowercase($0.prefix(8)) }
    }
}
