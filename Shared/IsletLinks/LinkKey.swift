import Crypto

/// A key links are signed with: an id (carried in the link) and a secret of at least 32 bytes.
public struct LinkKey: Sendable {
    public let id: String
    /// HMAC-SHA256 with this key and no message yet: each signature starts from a copy (the key's
    /// padding is hashed once, not per link).
    let mac: HMAC<SHA256>

    public init(id: String, secret: [UInt8]) throws(LinkError) {
        guard DeepLinkCodec.isIdentifier(id, maxLength: 32) else {
            throw LinkError("a link key id must be 1-32 characters of letters, digits and . _ ~ -, got \"\(id.prefix(40))\"")
        }
        guard secret.count >= 32 else { throw LinkError("the secret of link key \(id) must be at least 32 bytes") }
        self.id = id
        self.mac = HMAC<SHA256>(key: SymmetricKey(data: secret))
    }
}
