import Logging
import NIOCore
import NIOHTTPTypes

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
