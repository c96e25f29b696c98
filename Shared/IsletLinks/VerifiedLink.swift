import Foundation

/// A link that verified: what was tapped, signed by which key, when.
public struct VerifiedLink: Sendable, Equatable {
    public var target: TapTarget
    public var keyId: String
    public var issuedAt: Date
    /// The app's own URL, without Islet's parameters.
    public var baseURL: String
    /// The link's 16 signature bytes. With ``keyId`` they name the link however its text was
    /// spelled: the signature covers the link's canonical form, and it has one spelling only.
    public var signature: [UInt8]

    /// The link's identity, the same for every spelling of it: the key id and the signature, hex.
    public var identity: String { keyId + ":" + DeepLinkCodec.hex(signature) }
}
