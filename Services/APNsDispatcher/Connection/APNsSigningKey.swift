import Crypto
import Foundation
import JWTKit

/// An APNs signing key (the `.p8` file) and the team it belongs to. The key is read once and
/// never logged (its `description` shows only the key id).
public struct APNsSigningKey: Sendable, CustomStringConvertible {
    public let keyID: String
    public let teamID: String
    let privateKey: P256.Signing.PrivateKey

    public init(keyID: String, teamID: String, pem: String) throws {
        self.keyID = keyID
        self.teamID = teamID
        self.privateKey = try P256.Signing.PrivateKey(pemRepresentation: pem)
    }

    public init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.privateKey = privateKey
    }

    public var description: String { "APNsSigningKey(team: \(teamID), key: \(keyID))" }

    /// A provider token (an ES256 JWT signed with JWTKit: header `{alg, kid, typ}`, claims `{iss, iat}`)
    /// issued at `issuedAt`, rounded down to the second (APNs reads `iat` as whole seconds).
    public func providerToken(issuedAt: Date) async throws -> String {
        let keys = JWTKeyCollection()
        let kid = JWKIdentifier(string: keyID)
        await keys.add(ecdsa: try ES256PrivateKey(backing: privateKey), kid: kid)
        let claims = ProviderTokenClaims(
            iss: IssuerClaim(value: teamID),
            iat: IssuedAtClaim(value: Date(timeIntervalSince1970: issuedAt.timeIntervalSince1970.rounded(.down)))
        )
        return try await keys.sign(claims, kid: kid)
    }
}

/// The claims of an APNs provider token: the team that issued it and when.
struct ProviderTokenClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim

    /// APNs, not the sender, judges a provider token's age.
    func verify(using algorithm: some JWTAlgorithm) throws {}
}
