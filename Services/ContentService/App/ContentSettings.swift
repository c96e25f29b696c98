import Foundation
import GRPCCore
import Hummingbird
import IsletKafka
import IsletLinks
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle

/// content-service's own settings (besides ``ServiceSettings``), from the environment.
public struct ContentSettings: Sendable {
    /// `ISLET_TEMPLATES_DIR` (default `Services/ContentService/Templates`): the template files.
    public var templatesDirectory: String
    /// `ISLET_LINK_KEYS` (`kid=secret,…`, secrets of at least 32 bytes) and
    /// `ISLET_LINK_SIGNING_KEY` (the kid to sign with; needed when there are several).
    public var keyring: LinkKeyring
    public var policy: ContentPolicy
    public var freshness: FreshnessPolicy
    /// `ISLET_GRPC_HOST` (default `127.0.0.1`: the backends' API is not for the open network) and
    /// `ISLET_GRPC_PORT` (default 9083): the `ActivityService` API.
    public var grpcHost: String
    public var grpcPort: Int
    /// `ISLET_GRPC_KEYS`: the backends that may call the gRPC API and the HTTP API,
    /// `name=key:read+write,…` (``BackendKeys``). None: every call is refused.
    public var backendKeys: BackendKeys
    /// `ISLET_HTTP_MAX_BODY_BYTES` (default 65536): the largest body the HTTP API reads.
    public var maxBodyBytes = 65_536
    /// `ISLET_KAFKA_SEND_TIMEOUT_MS` (default 5000): how long a record may wait for Kafka's
    /// acknowledgement (a gRPC call then fails with UNAVAILABLE; push requests are sent again).
    public var sendTimeout: Duration
    /// Thumbnails of layout images (`ISLET_THUMBNAIL_HOSTS`, `_MAX_BYTES`, `_TIMEOUT_MS`).
    public var thumbnails = ThumbnailService.Settings()
    /// `ISLET_REGISTRY_GRPC` (`host:port` of token-registry's gRPC API) and `ISLET_REGISTRY_GRPC_KEY`
    /// (a backend key of its `ISLET_GRPC_KEYS` with `write`): where an activity the freshness
    /// monitor ended has its token invalidated. Unset: the token stays active until the app ends it.
    public var registry: (host: String, port: Int, key: String)?
    /// `ISLET_CONTENT_CHANGELOG_INTERVAL_MS` (default 5000, at least 100): how often the memories
    /// that changed are written to `islet.content-memory.v1` (``ChangelogWriter``). Shorter: less
    /// to read again after a crash, more records.
    public var changelogInterval: Duration = .seconds(5)
    /// `ISLET_CONTENT_PEERS` (`host:port,…` of the other instances' HTTP APIs; a name that resolves
    /// to several addresses counts as each, this instance's own address is left out): where a
    /// backend's question about an activity this instance does not own is asked
    /// (``PeerForwarding``). None: such a question is answered 421 `notOwner`.
    public var peers: [PeerForwarding.Peer] = []

    public init(
        templatesDirectory: String, keyring: LinkKeyring, policy: ContentPolicy = ContentPolicy(), freshness: FreshnessPolicy = FreshnessPolicy(),
        grpcHost: String = "127.0.0.1", grpcPort: Int = 9_083, sendTimeout: Duration = .seconds(5), backendKeys: BackendKeys = try! BackendKeys([:])
    ) {
        self.backendKeys = backendKeys
        self.templatesDirectory = templatesDirectory
        self.keyring = keyring
        self.policy = policy
        self.freshness = freshness
        self.grpcHost = grpcHost
        self.grpcPort = grpcPort
        self.sendTimeout = sendTimeout
    }

    public init(from config: IsletConfig) throws {
        let linkKeys = try config.properties("islet.link.keys", as: LinkKeyring.keys(fromSecrets:))
        let signingID = try config.string("islet.link.signing.key", default: linkKeys.count == 1 ? linkKeys[0].id : "")
        guard let signing = linkKeys.first(where: { $0.id == signingID }) else {
            throw ConfigurationError(key: "islet.link.signing.key", problem: "must name one of the keys of ISLET_LINK_KEYS")
        }
        var policy = ContentPolicy()
        policy.maximumAlerts = try config.int("islet.alerts.per.hour", default: 3, range: 0...100)
        switch config.optionalString("islet.dismissal") {
        case nil: break
        case "immediate": policy.dismissal = .immediate
        case "system": policy.dismissal = .system
        case let text?:
            guard let seconds = Int(text), (0...14_400).contains(seconds) else {
                throw ConfigurationError(key: "islet.dismissal", problem: "must be immediate, system or seconds up to 14400, got \(text)")
            }
            policy.dismissal = .after(.seconds(seconds))
        }
        var freshness = FreshnessPolicy()
        freshness.checkInterval = .seconds(try config.int("islet.freshness.interval.seconds", default: 5, range: 1...3_600))
        freshness.maximumResends = try config.int("islet.freshness.resends", default: 3, range: 0...100)
        freshness.resendSpacing = .seconds(try config.int("islet.freshness.resend.spacing.seconds", default: 60, range: 1...3_600))
        freshness.severeAfter = .seconds(try config.int("islet.freshness.severe.seconds", default: 600, range: 60...28_800))
        freshness.lifetime = .seconds(try config.int("islet.activity.lifetime.seconds", default: 28_200, range: 60...28_800))
        freshness.startConfirmation = .seconds(try config.int("islet.start.confirmation.seconds", default: 60, range: 1...3_600))
        self.init(
            templatesDirectory: try config.string("islet.templates.dir", default: "Services/ContentService/Templates"),
            keyring: LinkKeyring(signing: signing, accepted: linkKeys), policy: policy, freshness: freshness,
            grpcHost: try config.string("islet.grpc.host", default: "127.0.0.1"),
            grpcPort: try config.int("islet.grpc.port", default: 9_083, range: 0...65_535),
            sendTimeout: try config.milliseconds("islet.kafka.send.timeout.ms", default: .seconds(5)),
            backendKeys: try config.properties("islet.grpc.keys") { try BackendKeys($0) })
        maxBodyBytes = try config.int("islet.http.max.body.bytes", default: 65_536, range: 1_024...1_048_576)
        changelogInterval = try config.milliseconds("islet.content.changelog.interval.ms", default: .seconds(5))
        guard changelogInterval >= .milliseconds(100) else {
            throw ConfigurationError(key: "islet.content.changelog.interval.ms", problem: "must be at least 100")
        }
        do {
            peers = try PeerForwarding.Peer.list(config.optionalString("islet.content.peers") ?? "")
        } catch {
            throw ConfigurationError(key: "islet.content.peers", problem: "must be host:port of the other instances' HTTP APIs, comma-separated: \(error)")
        }
        thumbnails.allowedHosts = (config.optionalString("islet.thumbnail.hosts") ?? "").split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        thumbnails.maximumBytes = try config.int("islet.thumbnail.max.bytes", default: 2_000_000, range: 1_000...50_000_000)
        thumbnails.timeout = try config.milliseconds("islet.thumbnail.timeout.ms", default: .milliseconds(1_500))
        if let target = config.optionalString("islet.registry.grpc") {
            let parts = target.split(separator: ":")
            guard parts.count == 2, !parts[0].isEmpty, let port = Int(parts[1]), (1...65_535).contains(port) else {
                throw ConfigurationError(key: "islet.registry.grpc", problem: "must be host:port, got \(target)")
            }
            guard let key = config.optionalString("islet.registry.grpc.key", isSecret: true), key.utf8.count >= 32 else {
                throw ConfigurationError(key: "islet.registry.grpc.key", problem: "is required with ISLET_REGISTRY_GRPC: a backend key of token-registry's ISLET_GRPC_KEYS with write (at least 32 characters)")
            }
            registry = (String(parts[0]), port, key)
        }
    }
}
