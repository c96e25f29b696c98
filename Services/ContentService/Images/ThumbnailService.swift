import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle
import Synchronization

/// Fetches the images a layout shows and makes their thumbnails (``Thumbnailer``), for inlining
/// in the payload. Only hosts on the allow-list are asked, with a size and a time limit, no
/// redirects; results (failures too, for a while) are cached, so an image costs one fetch.
public final class ThumbnailService: Service, Sendable {
    public struct Settings: Sendable {
        /// `ISLET_THUMBNAIL_HOSTS`: hosts images may be fetched from (`cdn.example.com`, `*.example.com`,
        /// `127.0.0.1:8099`). Empty (the default): no fetching, images go by URL only.
        public var allowedHosts: [String] = []
        /// `ISLET_THUMBNAIL_MAX_BYTES` (default 2 MB): a larger image is refused.
        public var maximumBytes = 2_000_000
        /// `ISLET_THUMBNAIL_TIMEOUT_MS` (default 1500): the whole fetch, connection included.
        public var timeout: Duration = .milliseconds(1_500)
        /// Images kept (LRU).
        public var cacheSize = 512
        /// How long a failed fetch is not tried again.
        public var failureTTL: Duration = .seconds(300)

        public init(allowedHosts: [String] = []) { self.allowedHosts = allowedHosts }
    }

    /// Fetches one image's bytes; throws when it cannot (status, size, time).
    public typealias Fetch = @Sendable (URL, Settings) async throws -> [UInt8]

    public let settings: Settings
    private let fetch: Fetch
    private let client: HTTPClient?
    private let metrics: ContentMetrics
    private let logger: Logger
    private enum Entry { case ready([String]), failed(until: ContinuousClock.Instant) }
    private struct Cache {
        var entries: [String: Entry] = [:]
        var order: [String] = []
    }
    private let cache = Mutex(Cache())

    /// Fetches over HTTP(S) with its own client (no redirects: a redirect could leave the allow-list).
    public convenience init(settings: Settings, metrics: ContentMetrics, logger: Logger) {
        let client = HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: .init(redirectConfiguration: .disallow, timeout: .init(connect: .milliseconds(Int64(settings.timeout / .milliseconds(1))))))
        self.init(settings: settings, metrics: metrics, logger: logger, client: client) { url, settings in
            try await Self.download(url, settings: settings, client: client)
        }
    }

    init(settings: Settings, metrics: ContentMetrics, logger: Logger, client: HTTPClient? = nil, fetch: @escaping Fetch) {
        self.settings = settings
        self.metrics = metrics
        self.logger = logger
        self.client = client
        self.fetch = fetch
    }

    /// Keeps the HTTP client until the service group stops.
    public func run() async throws {
        try? await gracefulShutdown()
        try await client?.shutdown()
    }

    /// Whether `url` may be fetched: http(s) on an allowed host (and port, when the entry names one).
    public func isAllowed(_ url: URL) -> Bool {
        guard let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http", let host = url.host?.lowercased(), !host.isEmpty,
            url.user == nil
        else { return false }
        let hostPort = url.port.map { "\(host):\($0)" } ?? host
        return settings.allowedHosts.contains { entry in
            let entry = entry.lowercased()
            if entry.hasPrefix("*.") { return host.hasSuffix(entry.dropFirst(1)) && url.port == nil }
            return entry == hostPort || (entry == host && url.port == nil)
        }
    }

    /// The thumbnails (base64 JPEG, best first) of those of `urls` that could be fetched and read.
    public func thumbnails(for urls: [String]) async -> [String: [String]] {
        var result: [String: [String]] = [:]
        for address in urls {
            if let variants = await thumbnails(for: address) { result[address] = variants }
        }
        return result
    }

    private func thumbnails(for address: String) async -> [String]? {
        let now = ContinuousClock.now
        switch cache.withLock({ $0.entries[address] }) {
        case .ready(let variants)?:
            metrics.thumbnail("cached")
            return variants
        case .failed(let until)? where until > now:
            return nil
        default:
            break
        }
        guard let url = URL(string: address), isAllowed(url) else {
            metrics.thumbnail("not_allowed")
            remember(address, .failed(until: now + settings.failureTTL))
            return nil
        }
        do {
            let started = ContinuousClock.now
            let bytes = try await fetch(url, settings)
            let variants = try Thumbnailer.thumbnails(of: bytes).map { Data($0).base64EncodedString() }
            metrics.thumbnailMade(in: ContinuousClock.now - started)
            metrics.thumbnail("made")
            remember(address, .ready(variants))
            return variants
        } catch {
            metrics.thumbnail("failed")
            logger.info("no thumbnail", metadata: ["image.host": "\(url.host ?? "")", "error": "\(error)"])
            remember(address, .failed(until: now + settings.failureTTL))
            return nil
        }
    }

    private func remember(_ address: String, _ entry: Entry) {
        cache.withLock { cache in
            if cache.entries.updateValue(entry, forKey: address) == nil { cache.order.append(address) }
            if cache.order.count > settings.cacheSize {
                let evicted = cache.order.removeFirst()
                cache.entries[evicted] = nil
            }
        }
    }

    /// GET with the limits: 200 only, at most `maximumBytes`, within `timeout`.
    static func download(_ url: URL, settings: Settings, client: HTTPClient) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.headers.add(name: "Accept", value: "image/jpeg, image/png")
        let response = try await client.execute(request, timeout: .milliseconds(Int64(settings.timeout / .milliseconds(1))))
        guard response.status == .ok else { throw ThumbnailError("the image host answered \(response.status.code)") }
        if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length > settings.maximumBytes {
            throw ThumbnailError("the image is \(length) bytes; at most \(settings.maximumBytes)")
        }
        do {
            return Array(buffer: try await response.body.collect(upTo: settings.maximumBytes))
        } catch is NIOTooManyBytesError {
            throw ThumbnailError("the image is larger than \(settings.maximumBytes) bytes")
        }
    }
}
