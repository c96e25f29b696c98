#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// Limits what one client can hold on a public HTTP port: each request must arrive in full within
/// a deadline, and one address may keep only so many connections open.
///
/// A slow client (headers a line every few seconds, a body a byte at a time, or a connection opened
/// and left) otherwise holds its connection — memory, a file descriptor, a place in the server —
/// for as long as it likes, and a few hundred of them fill a port.
public struct HTTPConnectionLimits: Sendable, Equatable {
    /// How long a client has to send a whole request (head and body): from the connection's
    /// opening, and from the end of the previous response on a kept-alive connection. Past it the
    /// connection is closed. Zero turns it off.
    public var requestTimeout: Duration
    /// Connections one remote address may hold at once; the next is closed as soon as it opens.
    /// Zero turns it off (behind a proxy every connection comes from the proxy's address: let the
    /// proxy enforce it).
    public var maxConnectionsPerAddress: Int

    public init(requestTimeout: Duration = .seconds(15), maxConnectionsPerAddress: Int = 256) {
        self.requestTimeout = requestTimeout
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
    }
}

/// The connections each remote address holds now, shared by the handlers of one listener.
public final class ConnectionCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    public init() {}

    /// Counts a new connection of `address`; `false` (and not counted) when it already holds `limit`.
    func open(_ address: String, limit: Int) -> Bool {
        counts.withLock { counts in
            let current = counts[address, default: 0]
            guard limit <= 0 || current < limit else { return false }
            counts[address] = current + 1
            return true
        }
    }

    func close(_ address: String) {
        counts.withLock { counts in
            guard let current = counts[address] else { return }
            counts[address] = current > 1 ? current - 1 : nil
        }
    }

    /// The client an address stands for: an IPv4 address itself; an IPv6 address by its /64 (one
    /// subscriber's network: whoever holds one has billions of addresses to open connections from).
    public static func client(of address: String) -> String {
        guard address.contains(":") else { return address }
        var bytes = in6_addr()
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        let prefix = withUnsafeBytes(of: &bytes) { Array($0.prefix(8)) }
        if prefix.allSatisfy({ $0 == 0 }) { return address }  // ::1, IPv4-mapped: not a /64 of anyone's
        return stride(from: 0, to: 8, by: 2).map { String(UInt16(prefix[$0]) << 8 | UInt16(prefix[$0 + 1]), radix: 16) }.joined(separator: ":") + "::/64"
    }

    /// Connections of `address` now (tests).
    public func count(of address: String) -> Int { counts.withLock { $0[address, default: 0] } }
}

/// The channel handler that enforces ``HTTPConnectionLimits`` on one connection. It sits after the
/// HTTP codec (Hummingbird's `additionalChannelHandlers`), so it sees whole request heads and the
/// end of each request and response.
public final class HTTPConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private let limits: HTTPConnectionLimits
    private let counts: ConnectionCounts
    private let logger: Logger
    /// The address this connection was counted under (`nil`: not counted, or not yet).
    private var counted: String?
    private var started = false
    private var deadline: Scheduled<Void>?
    /// A request's head arrived and its end has not.
    private var reading = false
    /// Requests whose head arrived and whose response has not ended (more than one when pipelined).
    private var owed = 0

    public init(limits: HTTPConnectionLimits, counts: ConnectionCounts, logger: Logger) {
        self.limits = limits
        self.counts = counts
        self.logger = logger
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        finish()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        finish()
    }

    // The deadline runs while the client owes bytes: from the connection's opening (or the end of
    // what it last sent or was last answered) until a request is in full. It is off only while the
    // server owes a response to a request read in full.

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            reading = true
            owed += 1
            // A pipelined request read while the server is busy: its deadline starts now.
            if deadline == nil { armDeadline(context: context) }
        case .body:
            break
        case .end:
            reading = false
            if owed > 0 {
                // The whole request is in: the server takes its time to answer, not the client.
                deadline?.cancel()
                deadline = nil
            } else {
                // Answered before its body was in (a 404, a 413): the next request has its own deadline.
                armDeadline(context: context)
            }
        }
        context.fireChannelRead(data)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            owed = max(0, owed - 1)
            // Every request answered: the next one has its own deadline. A request still being read
            // (answered early) keeps the deadline it has.
            if owed == 0 && !reading { armDeadline(context: context) }
        }
        context.write(data, promise: promise)
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        if limits.maxConnectionsPerAddress > 0, let address = context.channel.remoteAddress?.ipAddress.map(ConnectionCounts.client(of:)) {
            guard counts.open(address, limit: limits.maxConnectionsPerAddress) else {
                // Debug, not warning: a flood of refused connections must not flood the log too.
                logger.debug(
                    "connection refused: its address holds the most connections allowed",
                    metadata: ["http.client": "\(address)", "limit": "\(limits.maxConnectionsPerAddress)"])
                context.close(promise: nil)
                return
            }
            counted = address
        }
        armDeadline(context: context)
    }

    private func armDeadline(context: ChannelHandlerContext) {
        deadline?.cancel()
        guard limits.requestTimeout > .zero else { return }
        let timeout = limits.requestTimeout
        let logger = self.logger
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(timeout)) { [context] in
            logger.debug("connection closed: no whole request within the request timeout", metadata: ["timeout": "\(timeout)"])
            context.close(promise: nil)
        }
    }

    private func finish() {
        deadline?.cancel()
        deadline = nil
        if let address = counted {
            counts.close(address)
            counted = nil
        }
    }
}
