import Crypto
import Foundation

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

        public init(keyID: String, teamID: String, publicKey: P256.Signing.PublicKey) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKey = publicKey
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

    private let keys: [String: Key]
    /// APNs refuses tokens older than this.
    public static let maximumAge: TimeInterval = 3_600

    public init(keys: [Key]) {
        self.keys = Dictionary(keys.map { ($0.keyID, $0) }, uniquingKeysWith: { $1 })
    }

    /// Verifies `authorization` (`bearer <jwt>`) at time `now`.
    public func verify(authorization: String?, now: Date) -> Result<Verified, Failure> {
        guard let authorization, !authorization.isEmpty else { return .failure(.missing) }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return .failure(.invalid) }
        let segments = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3,
            let headerData = Data(base64URL: segments[0]), let claimsData = Data(base64URL: segments[1]),
            let signatureData = Data(base64URL: segments[2]),
            let header = try? JSONDecoder().decode(Header.self, from: headerData),
            let claims = try? JSONDecoder().decode(Claims.self, from: claimsData)
        else { return .failure(.invalid) }
        guard header.alg == "ES256", let kid = header.kid, let key = keys[kid], claims.iss == key.teamID else {
            return .failure(.invalid)
        }
        let signingInput = Data(parts[1].utf8.prefix(segments[0].utf8.count + 1 + segments[1].utf8.count))
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            key.publicKey.isValidSignature(signature, for: signingInput)
        else { return .failure(.invalid) }
        let issuedAt = Date(timeIntervalSince1970: TimeInterval(claims.iat))
        guard issuedAt <= now.addingTimeInterval(60) else { return .failure(.invalid) }
        guard now.timeIntervalSince(issuedAt) <= Self.maximumAge else { return .failure(.expired) }
        return .success(Verified(keyID: kid, teamID: key.teamID, issuedAt: issuedAt))
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    private struct Claims: Decodable {
        var iss: String
        var iat: Int64
    }
}

/// The provider token in use on one HTTP/2 connection, and when it was first used there.
public struct ConnectionTokenState: Sendable {
    public private(set) var token: String?
    public private(set) var since: Date?

    /// APNs allows a new token on a connection at most every 20 minutes.
    public static let minimumInterval: TimeInterval = 20 * 60

    public init() {}

    /// Whether `token` may be used on this connection now; records it when it is new and allowed.
    public mutating func admit(_ token: String, now: Date) -> Bool {
        if token == self.token { return true }
        if let since, now.timeIntervalSince(since) < Self.minimumInterval { return false }
        self.token = token
        self.since = now
        return true
    }
}

extension Data {
    /// Decodes unpadded base64url (RFC 4648 §5).
    init?(base64URL text: Substring) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
