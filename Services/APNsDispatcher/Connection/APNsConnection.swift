import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One push to APNs: to a device token (`POST /3/device/<token>`), or a broadcast to every
/// activity subscribed to a channel (`POST /4/broadcasts/apps/<bundle>`, iOS 18).
public struct APNsPush: Sendable {
    /// Where a push goes.
    public enum Destination: Sendable, Equatable {
        /// One activity's (or a push-to-start) device token; `topic` is `apns-topic`,
        /// `<bundle id>.push-type.liveactivity`.
        case device(token: String, topic: String)
        /// A broadcast channel of the app: one push for all its subscribers.
        case channel(id: String, bundleID: String)
    }

    public var destination: Destination
    /// 10 or 5 (a broadcast may also use 1).
    public var priority: Int
    /// `apns-id` on the token path, `apns-request-id` on a broadcast: the request id (so a retry
    /// is recognised as the same push).
    public var apnsID: String
    /// `apns-expiration`, epoch seconds; 0: one attempt, not stored (the only value a channel
    /// that stores no message takes).
    public var expiration: Int64
    public var payload: ByteBuffer

    public init(destination: Destination, priority: Int, apnsID: String, expiration: Int64, payload: ByteBuffer) {
        self.destination = destination
        self.priority = priority
        self.apnsID = apnsID
        self.expiration = expiration
        self.payload = payload
    }

    public init(deviceToken: String, topic: String, priority: Int, apnsID: String, expiration: Int64, payload: ByteBuffer) {
        self.init(destination: .device(token: deviceToken, topic: topic), priority: priority, apnsID: apnsID, expiration: expiration, payload: payload)
    }

    /// The device token, or `nil` for a broadcast.
    public var deviceToken: String? {
        if case .device(let token, _) = destination { token } else { nil }
    }

    /// Whom it is for: the device token, or the channel id.
    public var recipient: String {
        switch destination {
        case .device(let token, _): token
        case .channel(let id, _): id
        }
    }
}

/// APNs's answer: the status, the `reason` of an error body, a 410's `timestamp`, the `apns-id`.
public struct APNsAnswer: Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var timestamp: Date?
    public var apnsID: String?

    public init(status: Int, reason: String? = nil, timestamp: Date? = nil, apnsID: String? = nil) {
        self.status = status
        self.reason = reason
        self.timestamp = timestamp
        self.apnsID = apnsID
    }
}

extension APNsAnswer {
    /// The answer read from a stream: its `:status`, its `apns-id`, and for an error the JSON body's
    /// `reason` and (with a 410) `timestamp`, milliseconds since 1970. A body that is not such JSON
    /// leaves both `nil`; the status alone then decides (``APNsAction/forAnswer(status:reason:)``).
    /// A timestamp outside the years an outcome can carry (``IsletDate/range``) is left out: the
    /// outcome would be refused by every reader, and `Int64.max` stopped the dispatcher.
    package init(status: Int, apnsID: String?, body: [UInt8]) {
        self.init(status: status, apnsID: apnsID)
        guard status != 200, !body.isEmpty, let error = try? JSONDecoder().decode(ErrorBody.self, from: Data(body)) else { return }
        reason = error.reason
        timestamp = error.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1_000) }.flatMap { IsletDate.range.contains($0) ? $0 : nil }
    }

    private struct ErrorBody: Decodable {
        var reason: String?
        var timestamp: Int64?
    }

    /// The answer as a push outcome records it.
    package var response: PushOutcome.APNsResponse {
        PushOutcome.APNsResponse(status: status, reason: reason, apnsId: apnsID, timestamp: timestamp)
    }
}

/// A push that got no answer.
public struct APNsTransportError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The connection could not be opened.
        case connect
        /// The server said (GOAWAY) it did not process the stream: safe to send again unchanged.
        case notProcessed
        /// The connection or stream ended without an answer; APNs may or may not have delivered it.
        case lost
        /// The deadline passed before the request was completely written (no connection in time,
        /// or for a stream, or the server granted no flow-control window): APNs cannot have
        /// processed a request whose end it never received, so it is safe to send again unchanged.
        /// The connection it waited on takes no more pushes.
        case stalled
        /// No answer within the deadline, after the request was written (or handed to TLS and the
        /// socket, from where it may still go out); the stream was cancelled. APNs may have delivered it.
        case timeout
    }

    public var kind: Kind
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// Whether APNs may have delivered the push (a resend could reach the phone twice): after a
    /// lost connection or a timeout, not after a failed connect, a GOAWAY or a stall.
    public var isAmbiguous: Bool { kind == .lost || kind == .timeout }
    public var description: String { "\(kind): \(detail)" }
}

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
            headers.add(name: "apns-push-type", value: "liveactivity")
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
        return APNsAnswer(status: reply.status, apnsID: reply.requestID, body: reply.body)
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

/// How a connection is used, shared by ``APNsConnection`` (any thread) and its ``APNsStreams``
/// (its event loop): the pushes under way on it, whether it is retired, and the server's GOAWAY.
final class ConnectionUsage: Sendable {
    private struct State {
        /// Pushes started on it and not finished.
        var active = 0
        /// It takes no new pushes and closes once none is active: a request on it was not written
        /// within its deadline, its stream ids are used up, or its lane replaced it.
        var retired = false
    }

    private let state = Mutex(State())
    let goAway = GoAwayWatcher()

    var isRetired: Bool { state.withLock { $0.retired } }

    func started() { state.withLock { $0.active += 1 } }

    /// A push finished; whether the connection is to close now (retired, none left).
    func finished() -> Bool {
        state.withLock { state in
            state.active -= 1
            return state.active == 0 && state.retired
        }
    }

    /// It takes no new pushes; whether it is to close now (none under way).
    @discardableResult
    func retire() -> Bool {
        state.withLock { state in
            state.retired = true
            return state.active == 0
        }
    }
}

/// A GOAWAY from the server, as ``APNsStreams`` read it: the last stream it processed. Read from
/// any thread (whether a connection is still usable).
final class GoAwayWatcher: Sendable {
    private let lastStreamID = Mutex<HTTP2StreamID?>(nil)

    var received: Bool { lastStreamID.withLock { $0 != nil } }

    /// Whether a stream was processed: `nil` while no GOAWAY came.
    func processed(_ stream: HTTP2StreamID) -> Bool? {
        lastStreamID.withLock { last in last.map { stream <= $0 } }
    }

    func note(lastStreamID last: HTTP2StreamID) {
        lastStreamID.withLock { $0 = min($0 ?? last, last) }
    }
}
