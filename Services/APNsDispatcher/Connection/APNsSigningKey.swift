import Crypto
import Foundation
import IsletMessages
import JWTKit

/// An APNs signing key (the `.p8` file), the team it belongs to, and what it may sign for. The
/// key is read once and never logged (its `description` shows only the key id and its scope).
public struct APNsSigningKey: Sendable, CustomStringConvertible {
    public let keyID: String
    public let teamID: String
    /// What APNs accepts the key for (since February 2025 a key may be limited).
    public let scope: Scope
    let privateKey: P256.Signing.PrivateKey

    /// A key's limits: one environment (`nil`: both), a list of topics — apps' bundle ids —
    /// (`nil`: every app of the team).
    public struct Scope: Sendable, Hashable, CustomStringConvertible {
        public var environment: APNsEnvironment?
        public var topics: Set<String>?

        public init(environment: APNsEnvironment? = nil, topics: Set<String>? = nil) {
            self.environment = environment
            self.topics = topics
        }

        /// A team key: both environments, every app.
        public static let team = Scope()

        public func covers(bundleID: String, environment: APNsEnvironment) -> Bool {
            (self.environment == nil || self.environment == environment) && (topics == nil || topics!.contains(bundleID))
        }

        /// The more limited key is preferred where several cover an app: topic-specific, then
        /// environment-only, then the team key.
        var specificity: Int { (topics == nil ? 0 : 2) + (environment == nil ? 0 : 1) }

        public var description: String {
            let environment = self.environment?.rawValue ?? "both environments"
            guard let topics else { return environment }
            return "\(environment), topics \(topics.sorted().joined(separator: "+"))"
        }
    }

    public init(keyID: String, teamID: String, pem: String, scope: Scope = .team) throws {
        self.keyID = keyID
        self.teamID = teamID
        self.scope = scope
        self.privateKey = try P256.Signing.PrivateKey(pemRepresentation: pem)
    }

    public init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey, scope: Scope = .team) {
        self.keyID = keyID
        self.teamID = teamID
        self.scope = scope
        self.privateKey = privateKey
    }

    public var description: String { "APNsSigningKey(team: \(teamID), key: \(keyID), scope: \(scope))" }

    /// The key of `keys` that signs for the app in `environment`: of the team's keys that cover
    /// it, the most limited (``Scope/specificity``); `nil` when none does.
    public static func choose(from keys: [APNsSigningKey], teamID: String, bundleID: String, environment: APNsEnvironment) -> APNsSigningKey? {
        keys.filter { $0.teamID == teamID && $0.scope.covers(bundleID: bundleID, environment: environment) }
            .max { ($0.scope.specificity, $1.keyID) < ($1.scope.specificity, $0.keyID) }
    }

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
