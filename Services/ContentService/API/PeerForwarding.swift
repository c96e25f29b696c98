import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import IsletRuntime
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
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

    /// Calls forwarded at once; another is answered 503 here rather than queued (a flood of
    /// questions to one instance costs the others a bounded number of calls).
    public static let maximumForwards = 64

    let peers: [Peer]
    let ownPort: Int
    private let admission = Admission(limit: maximumForwards)
    let timeout: Duration
    let metrics: ContentMetrics
    let logger: Logger
    private let send: Send
    private let owners = Mutex<[Int32: String]>([:])
    private struct Resolution {
        var at: ContinuousClock.Instant
        var addresses: [Peer: [String]]
        var urls: [String]
        var refreshing: Bool
    }
    private let resolved = Mutex<Resolution?>(nil)
    private let resolve: @Sendable (Peer) -> [String]

    /// - Parameters:
    ///   - ownPort: this instance's HTTP port (a peer at one of this machine's addresses and this port is itself).
    ///   - resolve: a peer's addresses (default: the system's resolver; tests give their own).
    ///   - send: how a call is made (default: AsyncHTTPClient; tests give their own).
    public init(
        peers: [Peer], ownPort: Int, timeout: Duration = .seconds(2), metrics: ContentMetrics, logger: Logger, resolve: (@Sendable (Peer) -> [String])? = nil,
        send: Send? = nil
    ) {
        self.peers = peers
        self.ownPort = ownPort
        self.timeout = timeout
        self.metrics = metrics
        self.logger = logger
        self.resolve = resolve ?? { Self.addresses(of: $0) }
        self.send = send ?? Self.client(timeout: timeout)
    }

    /// Whether a call was forwarded to this instance (it is answered here, never forwarded again).
    static func isForwarded(_ request: Request) -> Bool { request.headers[forwardedHeader] != nil }

    /// What became of a forwarded call.
    enum Outcome {
        /// An answer to relay: the owner's, or a 503 (a peer starting or holding no partition now,
        /// the owner busy: its `Retry-After` is relayed; or too many calls forwarded at once).
        case answered(Response)
        /// Every peer answered 421: no instance owns the partition now (none was reached that does).
        case noOwner
        /// A peer did not answer (down, slow): the call may have been handled there.
        case unknown
    }

    /// Asks the owner of `partition`: the one it learned, else every peer at once.
    func forward(_ request: Request, partition: Int32, body: [UInt8]? = nil) async -> Outcome {
        // Only the API's own routes, as one absolute path without empty segments (the router
        // ignores them): nothing in it can name another host.
        let path = "/" + request.uri.path.split(separator: "/").joined(separator: "/")
        guard path.hasPrefix("/v1/activities/") else { return .unknown }
        guard admission.enter() else {
            count("busy")
            return .answered(Self.tooManyForwarded)
        }
        defer { admission.leave() }
        let call = Call(
            method: request.method, pathAndQuery: path + (request.uri.query.map { "?\($0)" } ?? ""), headers: forwardedHeaders(of: request),
            body: body)
        let known = owners.withLock { $0[partition] }
        if let known, let outcome = await askKnown(known, call, partition: partition) { return outcome }
        let candidates = await urls().filter { $0 != known }
        let (found, busy, silent) = await askEveryone(candidates, call)
        // Learned from an answer only the owner gives; another (a refusal every instance gives alike)
        // is relayed, not learned from. A newer lesson another call learned meanwhile stays.
        owners.withLock { owners in
            if let (url, _, proves) = found, proves {
                owners[partition] = url
            } else if owners[partition] == known {
                owners[partition] = nil
            }
        }
        let outcome: Outcome
        if let (_, response, _) = found {
            outcome = .answered(response)
        } else if let busy {
            outcome = .answered(busy)
        } else {
            outcome = silent ? .unknown : .noOwner
        }
        switch outcome {
        case .answered: count(found != nil ? "owner found" : "unavailable")
        case .unknown: count("no answer")
        case .noOwner: count("none")
        }
        if case .unknown = outcome {
            logger.warning("a peer did not answer a forwarded call", metadata: ["partition": "\(partition)", "peers": "\(candidates)"])
        }
        return outcome
    }

    /// A call as it is forwarded.
    struct Call: Sendable {
        var method: HTTPRequest.Method
        var pathAndQuery: String
        var headers: HTTPFields
        var body: [UInt8]?
    }

    /// The 503 of an instance forwarding too many calls at once.
    static let tooManyForwarded = Response(
        status: .serviceUnavailable, headers: [.contentType: "application/json", .retryAfter: "1"],
        body: .init(
            byteBuffer: ByteBuffer(
                bytes: HTTPAPIError(
                    .serviceUnavailable, .unavailable, reason: "too many questions are being asked of other instances at once: retry in a moment"
                ).jsonBody)))

    /// The headers a forwarded call keeps (its credentials, its body's type, its idempotency
    /// key), and the one saying it was forwarded.
    private func forwardedHeaders(of request: Request) -> HTTPFields {
        var fields = HTTPFields()
        for name in [HTTPField.Name.authorization, .contentType, ActivityHTTPAPI.idempotencyKeyHeader] {
            if let value = request.headers[name] { fields[name] = value }
        }
        fields[Self.forwardedHeader] = "\(ownPort)"
        return fields
    }

    /// Asks the owner learned before. `nil`: it is not the owner any more (or did not answer a
    /// question), and every peer is to be asked.
    private func askKnown(_ known: String, _ call: Call, partition: Int32) async -> Outcome? {
        switch await ask(known, call.method, call.pathAndQuery, call.headers, call.body) {
        case .owner(let answer, _):
            count("known owner")
            return .answered(answer)
        case .unavailable(let answer):
            // Busy or rebalancing: its answer, and it stays the owner to ask (no fan-out onto a busy partition).
            count("unavailable")
            return .answered(answer)
        case .noAnswer:
            // Down, or gone with its address: not the owner to ask first any more. A keyed
            // event may have been published there (its retry asks everyone); a question is
            // asked of the others now.
            owners.withLock { owners in if owners[partition] == known { owners[partition] = nil } }
            guard call.method == .get else {
                count("no answer")
                return .unknown
            }
            return nil
        case .notOwner:
            return nil
        }
    }

    /// Asks every candidate at once: the owner's answer (and whether it proves ownership), else a
    /// 503 one gave, and whether one did not answer.
    private func askEveryone(_ candidates: [String], _ call: Call) async -> (found: (String, Response, Bool)?, busy: Response?, silent: Bool) {
        await withTaskGroup(of: (String, Answer).self) { group in
            for url in candidates {
                group.addTask { [self] in (url, await ask(url, call.method, call.pathAndQuery, call.headers, call.body)) }
            }
            var (busy, silent): (Response?, Bool) = (nil, false)
            for await (url, answer) in group {
                switch answer {
                case .owner(let response, let proves):
                    group.cancelAll()
                    return ((url, response, proves), busy, silent)
                case .unavailable(let response): busy = busy ?? response
                case .noAnswer: silent = true
                case .notOwner: break
                }
            }
            return (nil, busy, silent)
        }
    }

    private func count(_ to: String) {
        metrics.forwarded(to: to)
    }

    enum Answer {
        /// Anything but 421 and 503; `proves`: only the owner answers so (2xx, 404 of a known route,
        /// 409 of a key in flight, 422 of a key reused).
        case owner(Response, proves: Bool)
        /// 503: starting, holding no partition now, or the owner busy.
        case unavailable(Response)
        /// 421.
        case notOwner
        /// No answer within the timeout, or no connection.
        case noAnswer
    }

    private func ask(_ url: String, _ method: HTTPRequest.Method, _ pathAndQuery: String, _ headers: HTTPFields, _ body: [UInt8]?) async -> Answer {
        do {
            let answer = try await send(url, method, pathAndQuery, headers, body)
            switch answer.status {
            case .misdirectedRequest: return .notOwner
            case .serviceUnavailable: return .unavailable(answer)
            default:
                let proves = answer.status.kind == .successful || [.notFound, .conflict, .unprocessableContent].contains(answer.status)
                return .owner(answer, proves: proves)
            }
        } catch {
            logger.debug("a peer did not answer a forwarded call", metadata: ["peer": "\(url)", "error": "\(error)"])
            return .noAnswer
        }
    }

    /// The peers' base URLs, each address of each peer but this instance's own. Resolved on
    /// NIO's blocking pool (a slow resolver never holds the tasks that answer calls), again every 10
    /// seconds in the background while the last list serves (replicas come and go); a peer that
    /// resolves to nothing keeps its last addresses, and is warned of.
    private func urls() async -> [String] {
        let now = ContinuousClock.now
        let (cached, refresh) = resolved.withLock { state -> ([String]?, Bool) in
            guard var current = state else { return (nil, false) }
            guard now - current.at >= .seconds(10), !current.refreshing else { return (current.urls, false) }
            current.refreshing = true
            state = current
            return (current.urls, true)
        }
        guard let cached else { return await refreshURLs() }
        if refresh { Task { await self.refreshURLs() } }
        return cached
    }

    @discardableResult
    private func refreshURLs() async -> [String] {
        let (peers, ownPort, resolve) = (self.peers, self.ownPort, self.resolve)
        let resolved: [Peer: [String]] =
            (try? await NIOThreadPool.singleton.runIfActive {
                Dictionary(uniqueKeysWithValues: peers.map { ($0, resolve($0)) })
            }) ?? [:]
        let own = (try? await NIOThreadPool.singleton.runIfActive { Self.ownAddresses() }) ?? ["127.0.0.1", "::1"]
        return self.resolved.withLock { state in
            var addresses = state?.addresses ?? [:]
            for peer in peers {
                if let found = resolved[peer], !found.isEmpty {
                    addresses[peer] = found
                } else {
                    logger.warning("a peer of ISLET_CONTENT_PEERS does not resolve: its last addresses are kept", metadata: ["peer": "\(peer)"])
                }
            }
            var urls: [String] = []
            for peer in peers {
                for address in addresses[peer] ?? [] where !(peer.port == ownPort && own.contains(address)) {
                    let host = address.contains(":") ? "[\(address)]" : address
                    let url = "http://\(host):\(peer.port)"
                    if !urls.contains(url) { urls.append(url) }
                }
            }
            state = Resolution(at: .now, addresses: addresses, urls: urls, refreshing: false)
            return urls
        }
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
