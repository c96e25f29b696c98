import Foundation
import IsletMessages
import JWTKit

/// A JWT's header (JWTKit's), read before its signature is checked: which key (`kid`) and
/// algorithm it claims, so that a token cannot pick a key's algorithm. Shared by the app's JWTs
/// and tickets.
enum UnverifiedHeader {
    /// The header of `token`, or `nil` when it is not a JWT (three base64url parts, JSON objects).
    static func of(_ token: String) -> JWTHeader? {
        try? DefaultJWTParser().parse(Array(token.utf8), as: AnyClaims.self).header
    }

    /// Any payload that is a JSON object; its claims are read only after the signature verified.
    private struct AnyClaims: JWTPayload {
        func verify(using algorithm: some JWTAlgorithm) throws {}
    }
}
