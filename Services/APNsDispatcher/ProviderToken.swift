import Crypto
import Foundation
import Synchronization

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

    /// A provider token (ES256 JWT: header `{alg, kid}`, claims `{iss, iat}`) issued at `issuedAt`.
    public func providerToken(issuedAt: Date) throws -> String {
        let header = Self.base64URL(Array(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let claims = Self.base64URL(Array(#"{"iss":"\#(teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#.utf8))
        let signingInput = header + "." + claims
        let signature = try privateKey.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Self.base64URL(Array(signature.rawRepresentation))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// The provider tokens of one signing key: one per fixed time window, shared by every connection
/// of the process, so that all replicas rotate at the same moments (every ``window``, aligned to
/// the epoch).
///
/// APNs refuses a token older than an hour (403 ExpiredProviderToken) and a new token on one
/// connection more often than every 20 minutes (429 TooManyProviderTokenUpdates). With 30-minute
/// windows a connection switches to the window's token once its own is at least 20 minutes old
/// (``ConnectionToken``), so the token it uses is never older than 50 minutes.
public final class ProviderTokenSource: Sendable {
    public let key: APNsSigningKey
    public let window: TimeInterval
    private let cache = Mutex<(windowStart: Date, token: String)?>(nil)

    public init(key: APNsSigningKey, window: Duration = .seconds(1_800)) {
        self.key = key
        self.window = window / .seconds(1)
    }

    /// The token of the window `now` falls in (minted on first use).
    public func current(now: Date) throws -> String {
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / window).rounded(.down) * window)
        if let cached = cache.withLock({ $0 }), cached.windowStart == start { return cached.token }
        let token = try key.providerToken(issuedAt: start)
        cache.withLock { $0 = (start, token) }
        return token
    }

    /// A token issued now, after APNs said the current one expired; it serves the rest of the window.
    public func renew(now: Date) throws -> String {
        let start = Date(timeIntervalSince1970: (now.timeIntervalSince1970 / window).rounded(.down) * window)
        let token = try key.providerToken(issuedAt: now)
        cache.withLock { $0 = (start, token) }
        return token
    }
}

/// The provider token one connection uses, and since when. A connection adopts a newer token only
/// once its own has been in use for 20 minutes.
public struct ConnectionToken: Sendable {
    public private(set) var token: String?
    public private(set) var since: Date?
    public static let minimumLifetime: TimeInterval = 20 * 60

    public init() {}

    /// The token to send with a request now, given the source's `candidate`.
    public mutating func use(candidate: String, now: Date) -> String {
        if let token, let since, token != candidate, now.timeIntervalSince(since) < Self.minimumLifetime { return token }
        if token != candidate {
            token = candidate
            since = now
        }
        return candidate
    }
}
