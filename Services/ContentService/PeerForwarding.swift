import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Where the backends' questions about an activity go when this instance does not own its
/// partition: to the instance that does (``ActivityHTTPAPI``). The other instances are
/// `ISLET_CONTENT_PEERS`, `host:port` of their HTTP APIs; a name that resolves to several addresses
/// (docker compose's service name with several replicas) counts as each of them, and this
/// instance's own address is left out. Which peer owns a partition is learned from the answers:
/// the first asked — all at once — that does not answer 421 (`notOwner`) or 503 owns it, and is
/// asked first next time, until it answers 421.
///
/// A forwarded call carries `Islet-Forwarded` and the caller's own credentials (the peer checks
/// them again); a forwarded call is never forwarded again, so two instances that both think the
/// other owns a partition answer 421 instead of asking each other for ever.
public final class PeerForwarding: Sendable {
    public struct Peer: Hashable, Sendable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var description: String { "\(host):\(port)" }

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port`, comma-separated.
        public static func list(_ text: String) throws(ConfigurationProblem) -> [Peer] {
            try text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.map { entry throws(ConfigurationProblem) in
                guard let colon = entry.lastIndex(of: ":"), let port = Int(entry[entry.index(after: colon)...]), (1...65_535).contains(port),
                    colon > entry.startIndex
                else { throw ConfigurationProblem("\(entry) is not host:port") }
                return Peer(host: String(entry[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: port)
            }
        }
    }

    public struct ConfigurationProblem: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// The header a forwarded call carries (its value: the forwarding instance's port).
    static let forwardedHeader = HTTPField.Name("Islet-Forwarded")!
    /// The answers relayed, with their headers.
    static let relayedHeaders: [HTTPField.Name] = [.contentType, .retryAfter, ActivityHTTPAPI.replayedHeader]

    public typealias Send = @Sendable (_ baseURL: String, _ method: HTTPRequest.Method, _ pathAndQuery: String, _ headers: HTTPFields, _ body: [UInt8]?) async throws -> Response

    let peers: [Peer]
    let ownPort: Int
    let timeout: Duration
    let logger: Logger
    private let send: Send
    private let owners = Mutex<[Int32: String]>([:])
    private let resolved = Mutex<(at: ContinuousClock.Instant, urls: [String])?>(nil)
    private let resolve: @Sendable (Peer) -> [String]

    /// - Parameters:
    ///   - ownPort: this instance's HTTP port (a peer at one of this machine's addresses and this port is itself).
    ///   - resolve: a peer's addresses (default: the system's resolver; tests give their own).
    ///   - send: how a call is made (default: AsyncHTTPClient; tests give their own).
    public init(
        peers: [Peer], ownPort: Int, timeout: Duration = .seconds(2), logger: Logger, resolve: (@Sendable (Peer) -> [String])? = nil,
        send: Send? = nil
    ) {
        self.peers = peers
        self.ownPort = ownPort
        self.timeout = timeout
        self.logger = logger
        self.resolve = resolve ?? { Self.addresses(of: $0) }
        self.send = send ?? Self.client(timeout: timeout)
    }

    /// Whether a call was forwarded to this instance (it is answered here, never forwarded again).
    static func isForwarded(_ request: Request) -> Bool { request.headers[forwardedHeader] != nil }

    /// The owner's answer to the call; else a 503 a peer answered (it is starting or holds no
    /// partition now, or the owner is busy: its `Retry-After` is relayed); nil when every peer
    /// answered 421 or could not be reached: the caller answers it itself.
    func forward(_ request: Request, partition: Int32, body: [UInt8]? = nil) async -> Response? {
        let (pathAndQuery, method) = (request.uri.description, request.method)
        var headers = HTTPFields()
        for name in [HTTPField.Name.authorization, .contentType, ActivityHTTPAPI.idempotencyKeyHeader] {
            if let value = request.headers[name] { headers[name] = value }
        }
        headers[Self.forwardedHeader] = "\(ownPort)"
        let known = owners.withLock { $0[partition] }
        var unavailable: Response?
        if let known {
            switch await ask(known, method, pathAndQuery, headers, body) {
            case .owner(let answer):
                Counter(label: "islet_content_forwarded_total", dimensions: [("to", "known owner")]).increment()
                return answer
            case .unavailable(let answer): unavailable = answer
            case .notOwner: break
            }
        }
        let candidates = urls().filter { $0 != known }
        let sent = headers
        let (found, busy): ((String, Response)?, Response?) = await withTaskGroup(of: (String, Answer).self) { group in
            for url in candidates {
                group.addTask { [self] in (url, await ask(url, method, pathAndQuery, sent, body)) }
            }
            var busy: Response?
            for await (url, answer) in group {
                switch answer {
                case .owner(let response):
                    group.cancelAll()
                    return ((url, response), busy)
                case .unavailable(let response): busy = busy ?? response
                case .notOwner: break
                }
            }
            return (nil, busy)
        }
        unavailable = unavailable ?? busy
        owners.withLock { owners in owners[partition] = found?.0 }
        Counter(label: "islet_content_forwarded_total", dimensions: [("to", found != nil ? "owner found" : unavailable != nil ? "unavailable" : "none")])
            .increment()
        return found?.1 ?? unavailable
    }

    enum Answer {
        /// The owner answered (anything but 421 and 503).
        case owner(Response)
        /// 503: starting, holding no partition now, or the owner busy.
        case unavailable(Response)
        /// 421, or no answer.
        case notOwner
    }

    private func ask(_ url: String, _ method: HTTPRequest.Method, _ pathAndQuery: String, _ headers: HTTPFields, _ body: [UInt8]?) async -> Answer {
        do {
            let answer = try await send(url, method, pathAndQuery, headers, body)
            switch answer.status {
            case .misdirectedRequest: return .notOwner
            case .serviceUnavailable: return .unavailable(answer)
            default: return .owner(answer)
            }
        } catch {
            logger.debug("a peer did not answer a forwarded call", metadata: ["peer": "\(url)", "error": "\(error)"])
            return .notOwner
        }
    }

    /// The peers' base URLs, each address of each peer but this instance's own (resolved again
    /// every 10 seconds: replicas come and go).
    private func urls() -> [String] {
        let now = ContinuousClock.now
        if let cached = resolved.withLock({ $0 }), now - cached.at < .seconds(10) { return cached.urls }
        let own = Self.ownAddresses()
        var urls: [String] = []
        for peer in peers {
            for address in resolve(peer) where !(peer.port == ownPort && own.contains(address)) {
                let host = address.contains(":") ? "[\(address)]" : address
                let url = "http://\(host):\(peer.port)"
                if !urls.contains(url) { urls.append(url) }
            }
        }
        resolved.withLock { $0 = (now, urls) }
        return urls
    }

    /// The addresses `peer`'s host resolves to (numeric, IPv4 and IPv6).
    static func addresses(of peer: Peer) -> [String] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(peer.host, nil, &hints, &list) == 0, let first = list else { return [] }
        defer { freeaddrinfo(first) }
        var found: [String] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let entry = next {
            if let text = numeric(entry.pointee.ai_addr, length: entry.pointee.ai_addrlen), !found.contains(text) { found.append(text) }
            next = entry.pointee.ai_next
        }
        return found
    }

    /// This machine's own addresses (its interfaces', loopback included).
    static func ownAddresses() -> Set<String> {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return ["127.0.0.1", "::1"] }
        defer { freeifaddrs(first) }
        var found: Set<String> = []
        var next: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = next {
            if let address = entry.pointee.ifa_addr {
                let length = socklen_t(address.pointee.sa_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
                if let text = numeric(address, length: length) { found.insert(text) }
            }
            next = entry.pointee.ifa_next
        }
        return found
    }

    private static func numeric(_ address: UnsafeMutablePointer<sockaddr>?, length: socklen_t) -> String? {
        guard let address, [sa_family_t(AF_INET), sa_family_t(AF_INET6)].contains(address.pointee.sa_family) else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard getnameinfo(address, length, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 else { return nil }
        return String(cString: buffer)
    }

    /// Calls made with AsyncHTTPClient: no redirects, `timeout` for the whole call.
    static func client(timeout: Duration) -> Send {
        let client = HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: .init(redirectConfiguration: .disallow, timeout: .init(connect: .milliseconds(Int64(timeout / .milliseconds(1))))))
        return { baseURL, method, pathAndQuery, headers, body in
            var request = HTTPClientRequest(url: baseURL + pathAndQuery)
            request.method = .init(rawValue: method.rawValue)
            for field in headers { request.headers.add(name: field.name.rawName, value: field.value) }
            if let body { request.body = .bytes(body) }
            let response = try await client.execute(request, timeout: .milliseconds(Int64(timeout / .milliseconds(1))))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            var fields = HTTPFields()
            for name in relayedHeaders {
                if let value = response.headers.first(name: name.rawName) { fields[name] = value }
            }
            return Response(status: .init(code: Int(response.status.code)), headers: fields, body: .init(byteBuffer: bytes))
        }
    }
}
