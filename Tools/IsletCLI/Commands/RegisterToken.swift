import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

/// `islet register-token`: registers an activity's update token with token-registry, as the app would.
struct RegisterToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "register-token",
        abstract: "Register an activity's push token with token-registry (PUT /v1/activities/{id}/token).",
        discussion: """
            The registry wants the app's bearer JWT: give one with --jwt, or let the command sign one \
            for --user with a key the registry knows, --hs256-key kid=secret (as in ISLET_AUTH_HS256_KEYS) \
            or --es256-key kid=/path/private.pem. Without --token a random 32-byte test token is made. \
            The answer shows the token's fingerprint, never the token.

              islet register-token --activity order-42 --type DeliveryAttributes --bundle-id com.example.food \\
                --hs256-key app=$SECRET --user alice --frequent-updates
            """)

    @Option(help: "token-registry's base URL (default: $ISLET_CLI_REGISTRY_URL, else http://localhost:8081).")
    var registry: String?

    @Option(name: .customLong("activity"), help: "The activity id, e.g. order-42.")
    var activityId: String

    @Option(help: "The push token, hex (default: 32 random bytes, for a test).")
    var token: String?

    @Option(name: .customLong("type"), help: "The widget's ActivityAttributes type, e.g. DeliveryAttributes.")
    var attributesType: String

    @Option(name: .customLong("bundle-id"), help: "The app's bundle id.")
    var bundleId: String

    @Option(help: "production (default) or sandbox.")
    var environment = "production"

    @Flag(inversion: .prefixedNo, help: "Whether the app has frequent updates enabled (default: no).")
    var frequentUpdates = false

    @Option(name: .customLong("app-version"), help: "The app's version (default 1.0).")
    var appVersion = "1.0"

    @Option(name: .customLong("activity-started-at"), help: "When the activity started, ISO 8601 (default: now).")
    var activityStartedAt: String?

    @Option(name: .customLong("device-id"), help: "The app's id for the device (optional).")
    var deviceId: String?

    @Option(help: "The language the app shows the activity in, BCP 47 (e.g. zh-Hans-CN): its texts and alerts are rendered in it.")
    var locale: String?

    @Option(help: "The activity's ticket from its backend, a JWT sent as it is (docs/token-registry.md, \"Who owns an activity\").")
    var ticket: String?

    @Option(
        name: .customLong("ticket-key"),
        help: "Sign a ticket for --user, --activity and --bundle-id with this key, kid=secret, as a backend would (default: $ISLET_CLI_TICKET_KEY).")
    var ticketKey: String?

    @OptionGroup var auth: BearerOptions

    func validate() throws {
        _ = try PublishEvent.known(APNsEnvironment.self, environment, option: "--environment")
        if let activityStartedAt, IsletDate.parse(activityStartedAt) == nil {
            throw ValidationError("--activity-started-at must be ISO 8601, got \(activityStartedAt)")
        }
        try auth.check()
        if ticket != nil && ticketKey != nil { throw ValidationError("give one of --ticket, --ticket-key") }
    }

    /// The ticket to send: the one given, one signed with --ticket-key (or $ISLET_CLI_TICKET_KEY), or none.
    func activityTicket(now: Date = Date(), environment: [String: String] = ProcessInfo.processInfo.environment) async throws -> String? {
        if let ticket { return ticket }
        guard let key = ticketKey ?? environment["ISLET_CLI_TICKET_KEY"].flatMap({ $0.isEmpty ? nil : $0 }) else { return nil }
        let parts = key.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { throw ValidationError("--ticket-key expects kid=secret") }
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: parts[1]), digestAlgorithm: .sha256, kid: JWKIdentifier(string: parts[0]))
        let claims = TicketClaims(
            aud: .init(value: ["islet-activity"]), sub: .init(value: auth.user), act: activityId, bid: bundleId,
            exp: .init(value: now.addingTimeInterval(3_600)))
        return try await keys.sign(claims, kid: JWKIdentifier(string: parts[0]))
    }

    /// The request body (`token` as given, or `randomToken`).
    func body(now: Date = Date(), randomToken: () -> String = TestToken.random) -> TokenRegistrationBody {
        TokenRegistrationBody(
            token: token ?? randomToken(), attributesType: attributesType, app: .init(bundleId: bundleId, environment: environment),
            frequentUpdatesEnabled: frequentUpdates, appVersion: appVersion,
            activityStartedAt: activityStartedAt.flatMap(IsletDate.parse) ?? now, deviceId: deviceId, locale: locale)
    }

    func url(environment variables: [String: String] = ProcessInfo.processInfo.environment) throws -> String {
        let base = registry ?? variables["ISLET_CLI_REGISTRY_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://localhost:8081"
        guard let components = URLComponents(string: base), components.scheme == "http" || components.scheme == "https", components.host != nil else {
            throw ValidationError("--registry must be an http(s) URL, got \(base)")
        }
        return ServiceHTTP.activityURL(base: base, activityId: activityId, then: "token")
    }

    mutating func run() async throws {
        var body = body()
        body.ticket = try await activityTicket()
        let bearer = try await auth.bearer()
        let url = try url()
        var request = HTTPClientRequest(url: url)
        request.method = .PUT
        request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try IsletJSON.encode(body)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(15))
        let bytes = Array(buffer: try await response.body.collect(upTo: 1 << 20))
        let text = RegistryAnswer.describe(status: Int(response.status.code), body: bytes, activityId: activityId)
        if (200..<300).contains(Int(response.status.code)) {
            print(text)
            print("token fingerprint \(TokenFingerprint.of(token: body.token)) (the token itself is not shown)")
        } else {
            FileHandle.standardError.write(Data((text + "\n").utf8))
            throw ExitCode(1)
        }
    }
}

/// How the CLI gets the app's bearer JWT for token-registry.
struct BearerOptions: ParsableArguments {
    @Option(help: "A bearer JWT to send as it is (default: $ISLET_CLI_JWT).")
    var jwt: String?

    @Option(name: .customLong("hs256-key"), help: "Sign a JWT with this HS256 key, kid=secret (default: $ISLET_CLI_HS256_KEY).")
    var hs256Key: String?

    @Option(name: .customLong("es256-key"), help: "Sign a JWT with this ES256 private key, kid=/path/key.pem (default: $ISLET_CLI_ES256_KEY).")
    var es256Key: String?

    @Option(help: "The JWT's subject: the user who owns the activity (default islet-cli).")
    var user = "islet-cli"

    @Option(help: "The JWT's iss, when the registry checks it.")
    var issuer: String?

    @Option(help: "The JWT's aud, when the registry checks it.")
    var audience: String?

    @Option(name: .customLong("jwt-lifetime"), help: "Seconds the signed JWT is valid (default 300).")
    var lifetime = 300

    func check(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let source = try self.source(environment: environment)
        if case .none = source {
            throw ValidationError("token-registry needs a JWT: give --jwt, --hs256-key kid=secret or --es256-key kid=/path/key.pem")
        }
        if lifetime < 1 { throw ValidationError("--jwt-lifetime must be at least 1 second") }
    }

    enum Source: Equatable {
        case none
        case given(String)
        case hs256(kid: String, secret: String)
        case es256(kid: String, path: String)
    }

    /// A flag, else the first of the environment variables set; at most one flag.
    func source(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Source {
        if [jwt, hs256Key, es256Key].compactMap({ $0 }).count > 1 {
            throw ValidationError("give one of --jwt, --hs256-key, --es256-key")
        }
        let variable = { (name: String) in environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        let keyFlag = hs256Key != nil || es256Key != nil
        let given = jwt ?? (keyFlag ? nil : variable("ISLET_CLI_JWT"))
        if let given { return .given(given) }
        if let key = hs256Key ?? (es256Key != nil ? nil : variable("ISLET_CLI_HS256_KEY")) {
            let (kid, secret) = try Self.pair(key, option: "--hs256-key", shape: "kid=secret")
            return .hs256(kid: kid, secret: secret)
        }
        if let key = es256Key ?? variable("ISLET_CLI_ES256_KEY") {
            let (kid, path) = try Self.pair(key, option: "--es256-key", shape: "kid=/path/key.pem")
            return .es256(kid: kid, path: path)
        }
        return .none
    }

    private static func pair(_ text: String, option: String, shape: String) throws -> (String, String) {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw ValidationError("\(option) expects \(shape)")
        }
        return (parts[0], parts[1])
    }

    /// The JWT to send: the one given, or one signed now.
    func bearer(now: Date = Date(), environment: [String: String] = ProcessInfo.processInfo.environment) async throws -> String {
        let claims = BearerClaims(
            sub: .init(value: user), exp: .init(value: now.addingTimeInterval(TimeInterval(lifetime))), iat: .init(value: now),
            iss: issuer.map { .init(value: $0) }, aud: audience.map { .init(value: [$0]) })
        switch try source(environment: environment) {
        case .none:
            throw ValidationError("token-registry needs a JWT: give --jwt, --hs256-key or --es256-key")
        case .given(let jwt):
            return jwt
        case .hs256(let kid, let secret):
            let keys = JWTKeyCollection()
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
            return try await keys.sign(claims, kid: JWKIdentifier(string: kid))
        case .es256(let kid, let path):
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ValidationError("--es256-key: cannot read \(path)")
            }
            let keys = JWTKeyCollection()
            await keys.add(ecdsa: try ES256PrivateKey(pem: pem), kid: JWKIdentifier(string: kid))
            return try await keys.sign(claims, kid: JWKIdentifier(string: kid))
        }
    }
}

/// The claims token-registry reads: the user in `sub`, an expiry, and `iss`/`aud` when it checks them.
/// An activity ticket's claims (docs/token-registry.md, "Who owns an activity").
struct TicketClaims: JWTPayload {
    var aud: AudienceClaim
    var sub: SubjectClaim
    var act: String
    var bid: String
    var exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
