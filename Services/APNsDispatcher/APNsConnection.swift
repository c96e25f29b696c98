import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One push to APNs: the request line, headers and body of `POST /3/device/<token>`.
public struct APNsPush: Sendable {
    public var deviceToken: String
    /// `apns-topic`: `<bundle id>.push-type.liveactivity`.
    public var topic: String
    public var priority: Int
    /// `apns-id`: the request id (so a retry is recognised as the same push).
    public var apnsID: String
    /// `apns-expiration`, epoch seconds; 0: one attempt, not stored.
    public var expiration: Int64
    public var payload: ByteBuffer

    public init(deviceToken: String, topic: String, priority: Int, apnsID: String, expiration: Int64, payload: ByteBuffer) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.priority = priority
        self.apnsID = apnsID
        self.expiration = expiration
        self.payload = payload
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
        /// No answer within the deadline; the stream was cancelled. APNs may have delivered it.
        case timeout
    }

    public var kind: Kind
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// Whether APNs may have delivered the push (a resend could reach the phone twice).
    public var isAmbiguous: Bool { kind == .lost || kind == .timeout }
    public var description: String { "\(kind): \(detail)" }
}

/// One HTTP/2 connection to APNs over TLS, carrying many pushes at once (one stream each).
final class APNsConnection: Sendable {
    let id: Int
    private let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    private let goAway: GoAwayWatcher
    let authority: String
    /// The provider token in use on this connection.
    let providerToken = Mutex(ConnectionToken())

    private init(id: Int, channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, goAway: GoAwayWatcher, authority: String) {
        self.id = id
        self.channel = channel
        self.multiplexer = multiplexer
        self.goAway = goAway
        self.authority = authority
    }

    /// Whether new pushes may use it (open, and no GOAWAY received).
    var isUsable: Bool { channel.isActive && !goAway.received }

    static func connect(
        id: Int, host: String, port: Int, sslContext: NIOSSLContext, serverHostname: String?, connectTimeout: Duration,
        group: any EventLoopGroup
    ) async throws -> APNsConnection {
        let goAway = GoAwayWatcher()
        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
            HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
            HTTP2Setting(parameter: .enablePush, value: 0),
        ]
        do {
            let (channel, multiplexer) = try await ClientBootstrap(group: group)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connectTimeout(.nanoseconds(Int64(connectTimeout / .nanoseconds(1))))
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                        let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                            mode: .client, connectionConfiguration: connectionConfiguration, streamConfiguration: .init()
                        ) { inbound in inbound.close() }
                        try channel.pipeline.syncOperations.addHandler(goAway)
                        return (channel, multiplexer)
                    }
                }
            return APNsConnection(id: id, channel: channel, multiplexer: multiplexer, goAway: goAway, authority: host)
        } catch {
            throw APNsTransportError(.connect, "\(host):\(port): \(error)")
        }
    }

    /// Sends one push and waits for the answer, at most `deadline`.
    func send(_ push: APNsPush, authorization: String, deadline: Duration) async throws -> APNsAnswer {
        let promise = channel.eventLoop.makePromise(of: APNsAnswer.self)
        let goAway = self.goAway
        let authority = self.authority
        let streamFuture = multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(APNsStreamHandler(promise: promise, goAway: goAway))
            }
        }
        streamFuture.whenComplete { result in
            switch result {
            case .failure(let error):
                promise.fail(APNsTransportError(goAway.received ? .notProcessed : .lost, "stream not opened: \(error)"))
            case .success(let stream):
                var headers = HPACKHeaders()
                headers.reserveCapacity(11)
                headers.add(name: ":method", value: "POST")
                headers.add(name: ":scheme", value: "https")
                headers.add(name: ":authority", value: authority)
                headers.add(name: ":path", value: "/3/device/\(push.deviceToken)", indexing: .nonIndexable)
                headers.add(name: "authorization", value: "bearer \(authorization)")
                headers.add(name: "apns-push-type", value: "liveactivity")
                headers.add(name: "apns-topic", value: push.topic)
                headers.add(name: "apns-priority", value: String(push.priority))
                headers.add(name: "apns-id", value: push.apnsID, indexing: .nonIndexable)
                headers.add(name: "apns-expiration", value: String(push.expiration))
                headers.add(name: "content-length", value: String(push.payload.readableBytes))
                stream.write(HTTP2Frame.FramePayload.headers(.init(headers: headers)), promise: nil)
                // The deadline runs from when the request left (a stream may first wait for the
                // server's MAX_CONCURRENT_STREAMS), and cancels the stream (RST_STREAM) only if no
                // answer came.
                stream.writeAndFlush(HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(push.payload), endStream: true))).whenComplete { written in
                    if case .failure(let error) = written {
                        promise.fail(APNsTransportError(goAway.received ? .notProcessed : .lost, "request not written: \(error)"))
                        return
                    }
                    let timeout = stream.eventLoop.scheduleTask(in: .nanoseconds(Int64(deadline / .nanoseconds(1)))) {
                        promise.fail(APNsTransportError(.timeout, "no answer within \(deadline)"))
                        stream.close(promise: nil)
                    }
                    promise.futureResult.whenComplete { _ in timeout.cancel() }
                }
            }
        }
        return try await promise.futureResult.get()
    }

    func close() {
        channel.close(promise: nil)
    }

    var closeFuture: EventLoopFuture<Void> { channel.closeFuture }
}

/// Notes a GOAWAY from the server: the last stream it processed.
final class GoAwayWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    private let lastStreamID = Mutex<HTTP2StreamID?>(nil)

    var received: Bool { lastStreamID.withLock { $0 != nil } }

    /// Whether a stream was processed: `nil` while no GOAWAY came.
    func processed(_ stream: HTTP2StreamID) -> Bool? {
        lastStreamID.withLock { last in last.map { stream <= $0 } }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .goAway(let last, _, _) = unwrapInboundIn(data).payload {
            lastStreamID.withLock { $0 = min($0 ?? last, last) }
        }
    }
}

/// Collects one stream's answer, from its HTTP/2 frames: HEADERS with `:status`, and for an error
/// a JSON body in DATA.
final class APNsStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload

    private let promise: EventLoopPromise<APNsAnswer>
    private let goAway: GoAwayWatcher
    private var status: Int?
    private var apnsID: String?
    private var body: [UInt8] = []

    init(promise: EventLoopPromise<APNsAnswer>, goAway: GoAwayWatcher) {
        self.promise = promise
        self.goAway = goAway
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            if status == nil {
                status = frame.headers.first(name: ":status").flatMap { Int($0) }
                apnsID = frame.headers.first(name: "apns-id")
            }
            if frame.endStream { finish() }
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data, body.count < 4_096 { body += buffer.readableBytesView }
            if frame.endStream { finish() }
        default:
            break
        }
    }

    private func finish() {
        guard let status else {
            promise.fail(APNsTransportError(.lost, "an answer without :status"))
            return
        }
        promise.succeed(APNsAnswer(status: status, apnsID: apnsID, body: body))
    }

    func channelInactive(context: ChannelHandlerContext) {
        failWithoutAnswer(context: context, detail: "stream closed without an answer")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failWithoutAnswer(context: context, detail: "\(error)")
        context.close(promise: nil)
    }

    private func failWithoutAnswer(context: ChannelHandlerContext, detail: String) {
        let streamID = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
        let processed = streamID.flatMap { goAway.processed($0) }
        promise.fail(APNsTransportError(processed == false ? .notProcessed : .lost, detail))
    }

}
