import Foundation
import IsletProtos
import IsletRuntime

/// token-registry's own settings (besides ``ServiceSettings``), read from the environment.
/// docs/configuration.md lists them.
public struct RegistrySettings: Sendable {
    /// A key that verifies the app's bearer JWTs.
    public enum VerificationKey: Sendable, Equatable {
        /// HS256 with a shared secret (at least 32 bytes).
        case hs256(kid: String, secret: [UInt8])
        /// ES256 with a P-256 public key in PEM.
        case es256(kid: String, publicKeyPEM: String)

        public var kid: String {
            switch self {
            case .hs256(let kid, _), .es256(let kid, _): kid
            }
        }
    }

    /// `ISLET_AUTH_HS256_KEYS`: `kid=secret` pairs, comma-separated; and `ISLET_AUTH_ES256_KEYS`:
    /// `kid=path/to/public-key.pem` pairs. At least one key in all. A JWT names its key in `kid`.
    public var verificationKeys: [VerificationKey]
    /// `ISLET_AUTH_ISSUER` (optional): when set, a JWT's `iss` must equal it.
    public var issuer: String?
    /// `ISLET_AUTH_AUDIENCE` (optional): when set, a JWT's `aud` must contain it.
    public var audience: String?
    /// `ISLET_AUTH_MAX_LIFETIME_MS` (default 86400000, a day): a JWT valid for longer — from its
    /// `iat` (or from now, without one) to its `exp` — is refused: a stolen token must not open
    /// the API for years.
    public var maxTokenLifetime: Duration
    /// `ISLET_HTTP_MAX_BODY_BYTES` (default 8192): larger request bodies get 413.
    public var maxBodyBytes: Int
    /// `ISLET_GRPC_HOST` (default `127.0.0.1`: the backends' API is not for the open network) and
    /// `ISLET_GRPC_PORT` (default 9081): the backends' gRPC API.
    public var grpcHost: String
    public var grpcPort: Int
    /// `ISLET_QUOTA_LIVE_ACTIVITIES` (default 1000) and `ISLET_QUOTA_PUSH_TO_START` (default 100):
    /// active tokens one user may hold; past them a registration is 429 `quotaExceeded`. 0: no limit.
    public var quotas = Registry.Quotas()
    /// `ISLET_TOKEN_RETENTION_MS` (default 7 days; 0: kept for ever): an ended or invalidated
    /// token is deleted from `islet.tokens.v1` (a tombstone; every service's table drops it) this
    /// long after it ended. Checked hourly.
    public var tokenRetention: Duration = .seconds(7 * 86_400)
    /// `ISLET_GRPC_KEYS`: the backends that may call the gRPC API, `name=key:read+write,…`
    /// (``BackendKeys``). None: every call is refused.
    public var backendKeys: BackendKeys
    /// `ISLET_TICKET_HS256_KEYS`: `kid=secret` pairs (secrets of at least 32 bytes) that verify
    /// the activity tickets backends issue to owners (``ActivityTickets``). None: tickets are not
    /// verified, and a registration that sends one is refused.
    public var ticketKeys: [String: [UInt8]] = [:]
    /// `ISLET_TICKETS_REQUIRED` (default false): every update-token registration must carry a
    /// valid ticket (403 without one), so that no user can ever register another's activity.
    /// False keeps apps that send no ticket working: the first user to register an id owns it
    /// until its ticketed owner registers.
    public var ticketsRequired = false
    /// `ISLET_APPS` (comma-separated bundle ids; default none: any app): the apps this registry
    /// serves. A registration for another app is 400 on `app.bundleId` (`{bundleId}`): nobody can
    /// park an activity id or a device under an app that does not exist.
    public var apps: Set<String> = []
    /// `ISLET_CONTENT_HTTP` (`host:port` of content-service's backend HTTP API) and
    /// `ISLET_CONTENT_HTTP_KEY` (a backend key of its `ISLET_CONTENT_KEYS` with `read`): where an
    /// app's `GET /v1/activities/{activityId}/content` is read (``FirstContent``). Needs
    /// `ISLET_TICKET_HS256_KEYS` (the app proves the activity its user's with a ticket). Unset:
    /// that route answers 501.
    public var content: (host: String, port: Int, key: String)?
    /// `ISLET_KAFKA_SEND_TIMEOUT_MS` (default 5000): an app's change not acknowledged by Kafka
    /// within this time is answered 503 (the app retries; a late write is the same idempotent change).
    public var sendTimeout: Duration

    public init(
        verificationKeys: [VerificationKey], issuer: String? = nil, audience: String? = nil, maxTokenLifetime: Duration = .seconds(86_400),
        maxBodyBytes: Int = 8_192, grpcHost: String = "127.0.0.1", grpcPort: Int = 9_081, sendTimeout: Duration = .seconds(5),
        backendKeys: BackendKeys = try! BackendKeys([:])
    ) {
        self.backendKeys = backendKeys
        self.verificationKeys = verificationKeys
        self.issuer = issuer
        self.audience = audience
        self.maxTokenLifetime = maxTokenLifetime
        self.maxBodyBytes = maxBodyBytes
        self.grpcHost = grpcHost
        self.grpcPort = grpcPort
        self.sendTimeout = sendTimeout
    }

    /// The keys that verify the app's JWTs (`islet.auth.hs256.keys`, `islet.auth.es256.keys`): at least one.
    static func verificationKeys(from config: IsletConfig) throws(ConfigurationError) -> [VerificationKey] {
        var keys: [VerificationKey] = []
        for (kid, secret) in try config.properties("islet.auth.hs256.keys").sorted(by: { $0.key < $1.key }) {
            guard secret.utf8.count >= 32 else {
                throw ConfigurationError(key: "islet.auth.hs256.keys", problem: "secret of key \"\(kid)\" must be at least 32 bytes")
            }
            keys.append(.hs256(kid: kid, secret: Array(secret.utf8)))
        }
        for (kid, path) in try config.properties("islet.auth.es256.keys").sorted(by: { $0.key < $1.key }) {
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError(key: "islet.auth.es256.keys", problem: "cannot read the public key of \"\(kid)\" from \(path)")
            }
            keys.append(.es256(kid: kid, publicKeyPEM: pem))
        }
        guard !keys.isEmpty else {
            throw ConfigurationError(
                key: "islet.auth.hs256.keys", problem: "or ISLET_AUTH_ES256_KEYS must name at least one key to verify the app's JWTs")
        }
        return keys
    }

    /// content-service's backend API for an activity's first content (`islet.content.http`,
    /// `islet.content.http.key`), when set: host, port and key; it needs the ticket keys.
    static func content(from config: IsletConfig, ticketKeys: [String: [UInt8]]) throws(ConfigurationError) -> (host: String, port: Int, key: String)? {
        guard let target = config.optionalString("islet.content.http") else { return nil }
        guard let colon = target.lastIndex(of: ":"), colon > target.startIndex, let port = Int(target[target.index(after: colon)...]),
            (1...65_535).contains(port), !target.contains("/")
        else {
            throw ConfigurationError(key: "islet.content.http", problem: "must be host:port (no scheme), got \(target)")
        }
        guard let key = config.optionalString("islet.content.http.key", isSecret: true), key.utf8.count >= 32 else {
            throw ConfigurationError(
                key: "islet.content.http.key", problem: "is required with ISLET_CONTENT_HTTP: a backend key of content-service's ISLET_CONTENT_KEYS with read (at least 32 characters)")
        }
        guard !ticketKeys.isEmpty else {
            throw ConfigurationError(
                key: "islet.content.http", problem: "needs ISLET_TICKET_HS256_KEYS: an app proves with the activity's ticket that the content is its user's")
        }
        return (String(target[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port, key)
    }

    public init(from config: IsletConfig) throws(ConfigurationError) {
        let keys = try Self.verificationKeys(from: config)
        self.init(
            verificationKeys: keys,
            issuer: config.optionalString("islet.auth.issuer"),
            audience: config.optionalString("islet.auth.audience"),
            // A minute at least (0 would refuse every JWT), a year at most.
            maxTokenLifetime: .milliseconds(try config.int("islet.auth.max.lifetime.ms", default: 86_400_000, range: 60_000...31_536_000_000)),
            maxBodyBytes: try config.int("islet.http.max.body.bytes", default: 8_192, range: 256...1_048_576),
            grpcHost: try config.string("islet.grpc.host", default: "127.0.0.1"),
            grpcPort: try config.int("islet.grpc.port", default: 9_081, range: 0...65_535),
            sendTimeout: try config.milliseconds("islet.kafka.send.timeout.ms", default: .seconds(5)),
            backendKeys: try config.properties("islet.grpc.keys") { try BackendKeys($0) })
        // Up to a year (more than the 24 days a 32-bit millisecond count allows).
        tokenRetention = .milliseconds(try config.int("islet.token.retention.ms", default: 604_800_000, range: 0...31_536_000_000))
        for (kid, secret) in try config.properties("islet.ticket.hs256.keys") {
            guard secret.utf8.count >= 32 else {
                throw ConfigurationError(key: "islet.ticket.hs256.keys", problem: "secret of key \"\(kid)\" must be at least 32 bytes")
            }
            ticketKeys[kid] = Array(secret.utf8)
        }
        ticketsRequired = try config.bool("islet.tickets.required", default: false)
        if ticketsRequired && ticketKeys.isEmpty {
            throw ConfigurationError(key: "islet.tickets.required", problem: "needs ISLET_TICKET_HS256_KEYS to verify the tickets")
        }
        content = try Self.content(from: config, ticketKeys: ticketKeys)
        for app in (config.optionalString("islet.apps") ?? "").split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) })
        where !app.isEmpty {
            guard (try? Validation.bundleId(app)) != nil else {
                throw ConfigurationError(key: "islet.apps", problem: "\(app) is not a bundle id (com.example.app)")
            }
            apps.insert(app)
        }
        quotas = Registry.Quotas(
            liveActivities: try config.int("islet.quota.live.activities", default: 1_000, range: 0...10_000_000),
            pushToStart: try config.int("islet.quota.push.to.start", default: 100, range: 0...10_000_000),
            devicesPerActivity: try config.int("islet.quota.devices.per.activity", default: 1, range: 1...64))
    }
}
