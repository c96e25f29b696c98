import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One HTTP/2 connection to APNs over TLS, carrying many pushes at once (one stream each).
///
/// Every wait has a bound: ``connect(id:host:port:sslContext:serverHostname:connectTimeout:group:firstStreamID:)``
/// returns only once the TLS handshake is done and the server's HTTP/2 SETTINGS arrived, within
/// the connect timeout; ``send(_:authorization:deadline:)`` fails at its deadline whatever it is
/// waiting for (a stream, flow-control window, the answer).
///
/// Its streams are frames on the connection's own pipeline (``APNsStreams``, after NIO's
/// `NIOHTTP2Handler`), not a child channel each: a push is two frames written and two read, with no
/// channel, pipeline or handler made for it.
final class APNsConnection: Sendable {
    let id: Int
    private let channel: any Channel
    private let streams: NIOLoopBound<APNsStreams>
    private let usage: ConnectionUsage
    let authority: String
    /// The provider token in use on this connection.
    let providerToken = Mutex(ConnectionToken())

    private init(id: Int, channel: any Channel, streams: NIOLoopBound<APNsStreams>, usage: ConnectionUsage, authority: String) {
        self.id = id
        self.channel = channel
        self.streams = streams
        self.usage = usage
        self.authority = authority
    }

    /// Whether new pushes may use it (open, no GOAWAY received, no write stalled on it, stream ids left).
    var isUsable: Bool { channel.isActive && !usage.goAway.received && !usage.isRetired }

    /// Opens a connection: TCP, the TLS handshake and the server's HTTP/2 SETTINGS, all within
    /// `connectTimeout`; throws ``APNsTransportError/Kind/connect`` otherwise (a server that
    /// accepts and never answers the handshake included). `firstStreamID` is for tests (a
    /// connection near the end of its stream ids).
    static func connect(
        id: Int, host: String, port: Int, sslContext: NIOSSLContext, serverHostname: String?, connectTimeout: Duration,
        group: any EventLoopGroup, firstStreamID: HTTP2StreamID = 1
    ) async throws -> APNsConnection {
        let deadline = NIODeadline.now() + TimeAmount(connectTimeout)
        let usage = ConnectionUsage()
        let connectionConfiguration = {
            var configuration = NIOHTTP2Handler.ConnectionConfiguration()
            configuration.initialSettings = [
                HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
                HTTP2Setting(parameter: .initialWindowSize, value: APNsStreams.streamWindow),
                HTTP2Setting(parameter: .enablePush, value: 0),
            ]
            return configuration
        }()
        let (channel, ready, streams): (any Channel, EventLoopPromise<Void>, NIOLoopBound<APNsStreams>)
        do {
            (channel, ready, streams) = try await ClientBootstrap(group: group)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connectTimeout(TimeAmount(connectTimeout))
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let ready = channel.eventLoop.makePromise(of: Void.self)
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                        try pipeline.addHandler(NIOHTTP2Handler(mode: .client, connectionConfiguration: connectionConfiguration))
                        try pipeline.addHandler(SettingsWatcher(ready: ready))
                        let streams = APNsStreams(usage: usage, firstStreamID: firstStreamID)
                        try pipeline.addHandler(streams)
                        return (channel, ready, NIOLoopBound(streams, eventLoop: channel.eventLoop))
                    }
                }
        } catch {
            throw APNsTransportError(.connect, "\(host):\(port): \(error)")
        }
        // The server's SETTINGS come after the TLS handshake: both are done when they arrive.
        ready.fail(APNsTransportError(.connect, "\(host):\(port): no TLS handshake and HTTP/2 SETTINGS within \(connectTimeout)"), at: deadline)
        do {
            try await ready.futureResult.get()
        } catch {
            channel.close(promise: nil)
            throw error as? APNsTransportError ?? APNsTransportError(.connect, "\(host):\(port): \(error)")
        }
        return APNsConnection(id: id, channel: channel, streams: streams, usage: usage, authority: host)
    }

    /// Sends one push and waits for its answer until `deadline`, which bounds the whole attempt:
    /// a stream (the server's MAX_CONCURRENT_STREAMS), flow-control window to write the body, and
    /// the answer. At the deadline the stream is cancelled (RST_STREAM if it was opened); the error
    /// is ``APNsTransportError/Kind/timeout`` (ambiguous) if the request was completely written,
    /// ``APNsTransportError/Kind/stalled`` (not processed) if it was not — and then the connection
    /// takes no new pushes and closes once its other pushes are finished.
    func send(_ push: APNsPush, authorization: String, deadline: NIODeadline) async throws -> APNsAnswer {
        var headers = HPACKHeaders()
        headers.reserveCapacity(11)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        switch push.destination {
        case .device(let token, let topic):
            headers.add(name: ":path", value: "/3/device/\(token)", indexing: .nonIndexable)
            headers.add(name: "authorization", value: "bearer \(authorization)")
            headers.add(name: "apns-push-type", value: push.pushType)
            headers.add(name: "apns-topic", value: topic)
            headers.add(name: "apns-id", value: push.apnsID, indexing: .nonIndexable)
        case .channel(let id, let bundleID):
            headers.add(name: ":path", value: "/4/broadcasts/apps/\(bundleID)")
            headers.add(name: "authorization", value: "bearer \(authorization)")
            headers.add(name: "apns-push-type", value: "liveactivity")
            headers.add(name: "apns-channel-id", value: id)
            headers.add(name: "apns-request-id", value: push.apnsID, indexing: .nonIndexable)
        }
        headers.add(name: "apns-priority", value: String(push.priority))
        headers.add(name: "apns-expiration", value: String(push.expiration))
        headers.add(name: "content-length", value: String(push.payload.readableBytes))
        let reply = try await exchange(headers: headers, body: push.payload, maximumBody: APNsReply.maximumPushBody, deadline: deadline)
        return APNsAnswer(status: reply.status, apnsID: reply.requestID, uniqueID: reply.uniqueID, body: reply.body)
    }

    /// A channel management request (``APNsChannelRequest``) and its reply, bounded by `deadline`
    /// like a push.
    func manage(_ request: APNsChannelRequest, authorization: String, deadline: NIODeadline) async throws -> APNsReply {
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: request.method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: request.path)
        headers.add(name: "authorization", value: "bearer \(authorization)")
        headers.add(name: "apns-request-id", value: request.requestID, indexing: .nonIndexable)
        if let channelID = request.channelID { headers.add(name: "apns-channel-id", value: channelID) }
        if let body = request.body {
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(body.readableBytes))
        }
        return try await exchange(headers: headers, body: request.body, maximumBody: APNsReply.maximumManagementBody, deadline: deadline)
    }

    /// One request on a stream of its own and its reply; `body` nil: the HEADERS end the stream.
    private func exchange(headers: HPACKHeaders, body: ByteBuffer?, maximumBody: Int, deadline: NIODeadline) async throws -> APNsReply {
        let promise = channel.eventLoop.makePromise(of: APNsReply.self)
        usage.started()
        promise.futureResult.whenComplete { _ in
            if self.usage.finished() { self.channel.close(promise: nil) }
        }
        let request = APNsStreams.Request(headers: headers, body: body, maximumBody: maximumBody, deadline: deadline, reply: promise)
        let streams = self.streams
        channel.eventLoop.execute { streams.value.start(request) }
        return try await promise.futureResult.get()
    }

    /// Closes it once no push is active on it (at once if none is): its lane replaced it, and the
    /// pushes waiting for an answer on it still get one.
    func retire() {
        if usage.retire() { channel.close(promise: nil) }
    }

    func close() {
        channel.close(promise: nil)
    }

    var closeFuture: EventLoopFuture<Void> { channel.closeFuture }
}

/// Completes `ready` when the server's first SETTINGS frame arrives (the TLS handshake is done
/// and the server speaks HTTP/2); fails it if the connection fails or closes first.
final class SettingsWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame
    private let ready: EventLoopPromise<Void>

    init(ready: EventLoopPromise<Void>) { self.ready = ready }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .settings(.settings) = unwrapInboundIn(data).payload else { return context.fireChannelRead(data) }
        ready.succeed()
        context.fireChannelRead(data)
        // Its work is done: the connection's later frames do not pass through it.
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        ready.fail(error)
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        ready.fail(APNsTransportError(.connect, "closed before the HTTP/2 SETTINGS"))
        context.fireChannelInactive()
    }

    /// A channel that never became active (its TCP connect failed or timed out) is torn down
    /// without `channelInactive`: `ready` must complete all the same (a promise left pending is a
    /// leak, and a crash in debug builds). After the SETTINGS it is already complete: no effect.
    func handlerRemoved(context: ChannelHandlerContext) {
        ready.fail(APNsTransportError(.connect, "closed before the HTTP/2 SETTINGS"))
    }
}
