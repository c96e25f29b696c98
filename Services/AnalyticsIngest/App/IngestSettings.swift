import Foundation
import IsletLinks
import IsletRuntime

/// analytics-ingest's own settings (besides ``ServiceSettings``), read from the environment.
/// docs/configuration.md and docs/analytics.md list them.
public struct IngestSettings: Sendable {
    /// Who a caller is, for rate limiting.
    public enum ClientIdentity: Sendable, Equatable {
        /// The TCP peer's address (the default: correct when the app connects directly).
        case peerAddress
        /// From this forwarded-for header (e.g. `X-Forwarded-For`), believed only on requests whose
        /// TCP peer is one of the trusted proxies: the right-most address in it that is not a
        /// trusted proxy (``TrustedProxies/client(peer:forwardedFor:)``). Any other request is its
        /// peer address, whatever it sends.
        case forwardedHeader(String, trusting: TrustedProxies)
    }

    /// `ISLET_LINK_KEYS` (required): `kid=secret,…`, every link key whose links are accepted
    /// (the same variable content-service signs with; secrets of at least 32 bytes).
    public var keyring: LinkKeyring
    /// `ISLET_HTTP_MAX_BODY_BYTES` (default 262144): larger request bodies get 413.
    public var maxBodyBytes: Int
    /// `ISLET_ANALYTICS_MAX_BATCH` (default 100): more taps in one batch get 413.
    public var maxBatch: Int
    /// `ISLET_ANALYTICS_RATE_PER_SECOND` (default 20): requests per second a client may sustain;
    /// 0 turns rate limiting off.
    public var ratePerSecond: Double
    /// `ISLET_ANALYTICS_RATE_BURST` (default 40): requests a client may send at once after being idle.
    public var rateBurst: Double
    /// `ISLET_ANALYTICS_RATE_CLIENTS` (default 100000): clients the rate limiter remembers at most.
    public var rateClients: Int
    /// `ISLET_ANALYTICS_CLIENT_HEADER` (optional) with `ISLET_ANALYTICS_TRUSTED_PROXIES` (required
    /// with it: addresses or networks, comma-separated): take the client's address from this
    /// header when a trusted proxy sent the request, instead of the TCP peer.
    public var clientIdentity: ClientIdentity
    /// `ISLET_ANALYTICS_REJECTED_PER_SECOND` (default 50; 0: none): rejected and repeated taps
    /// written to `islet.clicks-rejected.v1` per second at most, by each instance; the rest are
    /// only counted (`islet_analytics_rejected_unrecorded_total`). Their answers are the same.
    public var rejectedPerSecond: Int
    /// `ISLET_ANALYTICS_RECENT_TAPS` (default 250000): taps remembered to count a repeat once.
    public var recentTaps: Int
    /// `ISLET_ANALYTICS_MAX_TAP_AGE_MS` (default 7 days): a tap older than this when it arrives is
    /// `expired` (a phone buffers taps offline, but not forever).
    public var maxTapAge: Duration
    /// `ISLET_KAFKA_SEND_TIMEOUT_MS` (default 5000): taps not acknowledged by Kafka within this
    /// time are answered 503 (the app retries; nothing it was told is accepted is lost).
    public var sendTimeout: Duration
    /// `ISLET_ANALYTICS_BENCH_ROUTE` (default false): serve `POST /bench/noop`, which reads the
    /// body and answers 204 — the reference route of scripts/bench-analytics.sh.
    public var benchRoute: Bool

    public init(
        keyring: LinkKeyring, maxBodyBytes: Int = 262_144, maxBatch: Int = 100, ratePerSecond: Double = 20, rateBurst: Double = 40,
        rateClients: Int = 100_000, clientIdentity: ClientIdentity = .peerAddress, recentTaps: Int = 250_000,
        maxTapAge: Duration = .seconds(7 * 86_400), sendTimeout: Duration = .seconds(5), benchRoute: Bool = false,
        rejectedPerSecond: Int = 50
    ) {
        self.rejectedPerSecond = rejectedPerSecond
        self.keyring = keyring
        self.maxBodyBytes = maxBodyBytes
        self.maxBatch = maxBatch
        self.ratePerSecond = ratePerSecond
        self.rateBurst = rateBurst
        self.rateClients = rateClients
        self.clientIdentity = clientIdentity
        self.recentTaps = recentTaps
        self.maxTapAge = maxTapAge
        self.sendTimeout = sendTimeout
        self.benchRoute = benchRoute
    }

    static func clientIdentity(from config: IsletConfig) throws(ConfigurationError) -> ClientIdentity {
        let proxies = config.optionalString("islet.analytics.trusted.proxies")
        guard let header = config.optionalString("islet.analytics.client.header") else {
            guard proxies == nil else {
                throw ConfigurationError(key: "islet.analytics.trusted.proxies", problem: "is set without ISLET_ANALYTICS_CLIENT_HEADER")
            }
            return .peerAddress
        }
        let entries = (proxies ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !entries.isEmpty else {
            throw ConfigurationError(
                key: "islet.analytics.trusted.proxies",
                problem: "must name the proxies whose \(header) is believed (addresses or networks): from anyone else it is the client's own claim")
        }
        do throws(TrustedProxiesError) {
            return .forwardedHeader(header, trusting: try TrustedProxies(entries))
        } catch {
            throw ConfigurationError(key: "islet.analytics.trusted.proxies", problem: error.description)
        }
    }

    public init(from config: IsletConfig) throws(ConfigurationError) {
        let linkKeys = try config.properties("islet.link.keys", as: LinkKeyring.keys(fromSecrets:))
        let first = linkKeys[0]
        let rate = try config.int("islet.analytics.rate.per.second", default: 20, range: 0...1_000_000)
        let burst = try config.int("islet.analytics.rate.burst", default: max(40, rate * 2), range: 1...10_000_000)
        self.init(
            // analytics-ingest never signs; the keyring's signing key is simply one of the accepted ones.
            keyring: LinkKeyring(signing: first, accepted: linkKeys),
            maxBodyBytes: try config.int("islet.http.max.body.bytes", default: 262_144, range: 1_024...16_777_216),
            maxBatch: try config.int("islet.analytics.max.batch", default: 100, range: 1...1_000),
            ratePerSecond: Double(rate),
            rateBurst: Double(burst),
            rateClients: try config.int("islet.analytics.rate.clients", default: 100_000, range: 1...10_000_000),
            clientIdentity: try Self.clientIdentity(from: config),
            recentTaps: try config.int("islet.analytics.recent.taps", default: 250_000, range: 1...50_000_000),
            maxTapAge: try config.milliseconds("islet.analytics.max.tap.age.ms", default: .seconds(7 * 86_400)),
            sendTimeout: try config.milliseconds("islet.kafka.send.timeout.ms", default: .seconds(5)),
            benchRoute: try config.bool("islet.analytics.bench.route", default: false),
            rejectedPerSecond: try config.int("islet.analytics.rejected.per.second", default: 50, range: 0...1_000_000))
    }
}
