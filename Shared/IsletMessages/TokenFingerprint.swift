import Crypto

/// A push token's fingerprint: the first 16 hex digits of the SHA-256 of its lowercase hex text.
///
/// Tokens are credentials (whoever has one can push to that lock screen), so logs, outcomes and
/// APIs carry this instead. It identifies a token well enough to correlate (an outcome with the
/// token it concerns) without revealing it.
public enum TokenFingerprint {
    public static func of(token: String) -> String {
        let digest = SHA256.hash(data: Array(token.lowercased().utf8))
        var hex = ""
        hex.reserveCapacity(16)
        for byte in digest.prefix(8) {
            hex += String(byte >> 4, radix: 16) + String(byte & 0xF, radix: 16)
        }
        return hex
    }
}
