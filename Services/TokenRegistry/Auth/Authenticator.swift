import Foundation
import IsletMessages
import JWTKit

/// Verifies the app's bearer JWTs and returns the user they were issued to.
///
/// A JWT must name its key in `kid` (one of ``RegistrySettings/verificationKeys``), be signed
/// with that key's algorithm (HS256 or ES256: a token cannot choose a weaker one), carry a
/// subject (the user id) and an expiry in the future, be valid already (`nbf`) and issued already
/// (`iat`) — both with ``leeway`` for the phone's and the issuer's clocks — be valid for at most
/// ``RegistrySettings/maxTokenLifetime``, and match the configured issuer and audience when those
/// are set.
public struct Authenticator: Sendable {
    /// Clock difference allowed between the token's issuer and this service, for `nbf` and `iat`.
    public static let leeway: TimeInterval = 60

    private let keys: JWTKeyCollection
    private let algorithms: [String: String]
    private let issuer: String?
    private let audience: String?
    private let maxLifetime: TimeInterval
    private let clock: any WallClock

    /// What a verified JWT says about its caller.
    struct Claims: JWTPayload {
        var sub: SubjectClaim
        var exp: ExpirationClaim
        var iss: IssuerClaim?
        var aud: AudienceClaim?
        var nbf: NotBeforeClaim?
        var iat: IssuedAtClaim?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    public init(settings: RegistrySettings, clock: any WallClock = SystemWallClock()) async throws {
        let keys = JWTKeyCollection()
        var algorithms: [String: String] = [:]
        for key in settings.verificationKeys {
            switch key {
            case .hs256(let kid, let secret):
                await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
                algorithms[kid] = "HS256"
            case .es256(let kid, let pem):
                await keys.add(ecdsa: try ES256PublicKey(pem: pem), kid: JWKIdentifier(string: kid))
                algorithms[kid] = "ES256"
            }
        }
        self.keys = keys
        self.algorithms = algorithms
        self.issuer = settings.issuer
        self.audience = settings.audience
        self.maxLifetime = settings.maxTokenLifetime / .seconds(1)
        self.clock = clock
    }

    /// The user id of a request's `Authorization: Bearer <jwt>` header, or a 401 naming the problem.
    func user(authorization: String?) async throws(APIError) -> String {
        guard let authorization, !authorization.isEmpty else {
            throw .unauthenticated("an Authorization: Bearer <JWT> header is required")
        }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw .unauthenticated("the Authorization header must be \"Bearer <JWT>\"")
        }
        let token = String(parts[1])
        guard token.utf8.count <= 4_096 else { throw .unauthenticated("the JWT is longer than 4096 bytes") }
        guard let header = UnverifiedHeader.of(token) else { throw .unauthenticated("the JWT is malformed") }
        guard let kid = header.kid, let algorithm = algorithms[kid] else {
            throw .unauthenticated("the JWT's kid does not name a known key")
        }
        guard header.alg == algorithm else {
            throw .unauthenticated("the JWT's algorithm must be \(algorithm) for key \(kid)")
        }
        let claims: Claims
        do {
            claims = try await keys.verify(token, as: Claims.self)
        } catch {
            throw .unauthenticated("the JWT's signature or claims do not verify")
        }
        let now = clock.date
        guard now < claims.exp.value else { throw .unauthenticated("the JWT has expired") }
        if let notBefore = claims.nbf?.value, notBefore > now.addingTimeInterval(Self.leeway) {
            throw .unauthenticated("the JWT is not valid yet (nbf)")
        }
        if let issuedAt = claims.iat?.value, issuedAt > now.addingTimeInterval(Self.leeway) {
            throw .unauthenticated("the JWT was issued in the future (iat)")
        }
        let validFrom = [claims.iat?.value, claims.nbf?.value].compactMap { $0 }.max() ?? now
        guard claims.exp.value.timeIntervalSince(min(validFrom, now)) <= maxLifetime + Self.leeway else {
            throw .unauthenticated("the JWT is valid for longer than \(Int(maxLifetime)) s (ISLET_AUTH_MAX_LIFETIME_MS)")
        }
        if let issuer, claims.iss?.value != issuer {
            throw .unauthenticated("the JWT was not issued by \(issuer)")
        }
        if let audience, claims.aud?.value.contains(audience) != true {
            throw .unauthenticated("the JWT is not intended for \(audience)")
        }
        let user = claims.sub.value
        guard Validation.isIdentifier(user, maxLength: 128) else {
            throw .unauthenticated("the JWT's subject must be 1-128 characters of letters, digits and . _ ~ -")
        }
        return user
    }

}
