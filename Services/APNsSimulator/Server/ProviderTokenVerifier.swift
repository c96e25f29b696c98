import Crypto
import Foundation
import IsletMessages
import JWTKit

/// Checks APNs provider tokens (ES256 JWTs) the way APNs does: the key named by `kid` must be
/// known, `iss` must be that key's team, the signature must verify, and `iat` must be less than an
/// hour old. Per connection, a new token more often than every 20 minutes is refused
/// (``ConnectionTokenState``).
public struct ProviderTokenVerifier: Sendable {
    /// A signing key APNs knows: its key id, the team it belongs to, its public key.
    public struct Key: Sendable {
        public var keyID: String
        public var teamID: String
        public var publicKey: P256.Signing.PublicKey
        /// A key limited to one environment (APNs, February 2025); `nil`: both.
        public var environment: APNsEnvironment?
        /// A topic-specific key's apps (bundle ids); `nil`: every app of the team.
        public var topics: Set<String>?

        public init(
            keyID: String, teamID: String, publicKey: P256.Signing.PublicKey, environment: APNsEnvironment? = nil, topics: Set<String>? = nil
        ) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKey = publicKey
            self.environment = environment
            self.topics = topics
        }
    }

    public enum Failure: Error, Equatable, Sendable {
        case missing, invalid, expired

        /// APNs's reason (all with status 403).
        public var reason: String {
            switch self {
            case .missing: "MissingProviderToken"
            case .invalid: "InvalidProviderToken"
            case .expired: "ExpiredProviderToken"
            }
        }
    }

    /// What a verified token said.
    public struct Verified: Sendable, Equatable {
        public var keyID: String
        public var teamID: String
        public var issuedAt: Date
    }

    private let keys: JWTKeyCollection
    private let teams: [String: String]
    /// Each key's limits, by key id.
    private let scopes: [String: (environment: APNsEnvironment?, topics: Set<String>?)]
    /// APNs refuses tokens older than this.
    public static let maximumAge: TimeInterval = 3_600

    public init(keys: [Key]) async throws {
        let collection = JWTKeyCollection()
        for key in keys {
            await collection.add(ecdsa: try ES256PublicKey(backing: key.publicKey), kid: JWKIdentifier(string: key.keyID))
        }
        self.keys = collection
        self.teams = Dictionary(keys.map { ($0.keyID, $0.teamID) }, uniquingKeysWith: { $1 })
        self.scopes = Dictionary(keys.map { ($0.keyID, ($0.environment, $0.topics)) }, uniquingKeysWith: { $1 })
    }

    /// What APNs answers a request for `bundleID` signed with `keyID` in `environment` (the
    /// environment the server plays; `nil`: either), by the key's limits: a key of the other
    /// environment is 403 `BadEnvironmentKeyInToken`, a topic-specific key used for another app
    /// 400 `TopicDisallowed`; `nil` when the key covers it.
    public func scopeRejection(keyID: String, bundleID: String, environment: APNsEnvironment?) -> APNsRejection? {
        guard let scope = scopes[keyID] else { return nil }
        if let limited = scope.environment, let environment, limited != environment { return APNsRejection(403, "BadEnvironmentKeyInToken") }
        if let topics = scope.topics, !topics.contains(bundleID) { return APNsRejection(400, "TopicDisallowed") }
        return nil
    }

    /// Verifies `authorization` (`bearer <jwt>`) at time `now`.
    public func verify(authorization: String?, now: Date) async -> Result<Verified, Failure> {
        guard let authorization, !authorization.isEmpty else { return .failure(.missing) }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return .failure(.invalid) }
        let token = Array(parts[1].utf8)
        // The header first: the key it names must be known and the algorithm must be that key's.
        guard let header = try? DefaultJWTParser().parse(token, as: Claims.self).header,
            header.alg == "ES256", let kid = header.kid, let team = teams[kid],
            let claims = try? await keys.verify(token, as: Claims.self), claims.iss.value == team
        else { return .failure(.invalid) }
        let issuedAt = claims.iat.value
        // APNs reads `iat` as whole seconds since the epoch.
        guard issuedAt.timeIntervalSince1970.rounded(.down) == issuedAt.timeIntervalSince1970 else { return .failure(.invalid) }
        guard issuedAt <= now.addingTimeInterval(60) else { return .failure(.invalid) }
        guard now.timeIntervalSince(issuedAt) <= Self.maximumAge else { return .failure(.expired) }
        return .success(Verified(keyID: kid, teamID: team, issuedAt: issuedAt))
    }

    /// A provider token's claims; their age is judged by ``verify(authorization:now:)`` with its `now`.
    private struct Claims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim

        func verify(using algorithm: some JWTAlgorithm) throws {}
    }
}
