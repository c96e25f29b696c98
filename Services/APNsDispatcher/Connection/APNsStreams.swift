import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// Every stream of one connection, as frames on the connection's pipeline, after NIO's
/// `NIOHTTP2Handler` (which keeps each stream's state, MAX_CONCURRENT_STREAMS — a request past it
/// waits in its buffer — and the outbound flow-control windows).
///
/// A ``Request`` given to ``start(_:)`` gets the next client stream id: its HEADERS (and DATA)
/// go out, and the answer's frames (HEADERS with `:status`, then a body in DATA) are collected
/// into its ``APNsReply``. Each request fails on its own: at its deadline (a timeout if it was
/// completely written, its stream reset; a stall if not), when its stream is closed without an
/// answer (reset by the server, or refused by a GOAWAY: not processed), or when the connection
/// closes. It also gives the connection's inbound flow-control window back as NIO reports it used
/// (streams start with ``streamWindow``, more than any answer kept).
final class APNsStreams: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// One request and where its answer goes.
    struct Request: Sendable {
        var headers: HPACKHeaders
        /// `nil`: the HEADERS end the stream.
        var body: ByteBuffer?
        var maximumBody: Int
        var deadline: NIODeadline
        var reply: EventLoopPromise<APNsReply>
    }

    /// The initial window of every stream this side receives on (SETTINGS_INITIAL_WINDOW_SIZE).
    static let streamWindow = 1 << 20

    fileprivate struct Stream {
        let reply: EventLoopPromise<APNsReply>
        let maximumBody: Int
        var written = false
        /// Its deadline passed before it was completely written: the reset's write is under way,
        /// and what it does to this request's write says whether its end left (``expire(_:)``).
        var expired = false
        var status: Int?
        var requestID: String?
        var channelID: String?
        var uniqueID: String?
        var body: [UInt8] = []
        var deadline: Scheduled<Void>?
    }

    private let usage: ConnectionUsage
    private var goAway: GoAwayWatcher { usage.goAway }
    /// Set while the handler is in the pipeline of an open connection.
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Stream] = [:]
    /// The id the next request's stream gets; `nil` once they are used up (2^31 - 1).
    private var nextStreamID: HTTP2StreamID?
    /// A flush is enqueued on the event loop (``flushSoon(_:)``).
    private var flushPending = false

    init(usage: ConnectionUsage, firstStreamID: HTTP2StreamID = 1) {
        self.usage = usage
        self.nextStreamID = firstStreamID
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    // MARK: Requests

    /// Opens the request's stream and writes it (on the connection's event loop).
    func start(_ request: Request) {
        guard let context else {
            return request.reply.fail(APNsTransportError(goAway.received ? .notProcessed : .lost, "stream not opened: the connection is closed"))
        }
        if goAway.received {
            return request.reply.fail(APNsTransportError(.notProcessed, "stream not opened: the server sent GOAWAY"))
        }
        guard let streamID = nextStreamID else {
            // Not written, so safe to send again; the connection takes no more.
            usage.retire()
            return request.reply.fail(APNsTransportError(.notProcessed, "stream not opened: no stream ids left on this connection"))
        }
        nextStreamID = Int(streamID) <= Int(Int32.max) - 2 ? streamID.advanced(by: 2) : nil
        var stream = Stream(reply: request.reply, maximumBody: request.maximumBody)
        stream.deadline = context.eventLoop.assumeIsolated().scheduleTask(deadline: request.deadline) { [self] in
            expire(streamID)
        }
        streams[streamID] = stream

        // Written once the request's end (END_STREAM) is on the socket: from then on APNs may have
        // processed it, and a deadline is a timeout rather than a stall.
        let end = context.eventLoop.makePromise(of: Void.self)
        if let body = request.body {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: request.headers)))), promise: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: end)
        } else {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: request.headers, endStream: true)))), promise: end)
        }
        flushSoon(context)
        end.futureResult.assumeIsolated().whenComplete { [self] written in
            let expired = streams[streamID]?.expired == true
            switch written {
            case .success where expired:
                // Its end left with the reset, past the deadline: APNs may have it.
                fail(streamID, APNsTransportError(.timeout, "written only at the deadline, before its reset; no answer"))
            case .success:
                streams[streamID]?.written = true
            case .failure(let error) where expired && error is NIOHTTP2Errors.StreamClosed:
                // Dropped from NIO's buffers by the reset: it never left.
                fail(streamID, Self.stall)
            case .failure(let error) where error is NIOHTTP2Errors.StreamClosed:
                // Closed by NIO while its frames waited in its buffers: by a GOAWAY whose frame NIO
                // hands on only after failing the writes it dropped (or by a reset). Classified once
                // that frame is read (the stream's close event, or this turn's end, decides).
                context.eventLoop.assumeIsolated().execute { [self] in
                    guard streams[streamID] != nil else { return }
                    fail(streamID, ended(streamID, refused: false, "request not completely written: \(error)"))
                }
            case .failure(let error):
                fail(streamID, APNsTransportError(goAway.received ? .notProcessed : .lost, "request not written: \(error)"))
            }
        }
    }

    /// Flushes once the requests started in this turn of the event loop are written: those that
    /// arrive together (the engine hands them over in bursts as answers come in) share one TLS
    /// record and one write on the socket, instead of one each.
    private func flushSoon(_ context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        context.eventLoop.assumeIsolated().execute { [self] in
            flushPending = false
            self.context?.flush()
        }
    }

    private static let stall = APNsTransportError(.stalled, "not completely written by the deadline (no stream, or no flow-control window, before its reset)")

    /// The deadline passed: the stream is cancelled. A stream that got its answer is never reset (a
    /// server may read RST_STREAM on completed streams as a rapid-reset attack).
    ///
    /// A request written completely is a timeout (APNs may have it). One that was not retires the
    /// connection, and is a stall (safe to send again, alert and all) only when its end surely never
    /// left, as the reset's own write shows at once:
    /// - frames still in NIO's buffers (waiting for a free stream or for flow-control window) are
    ///   dropped by the reset, unsent: their write fails with `StreamClosed`, a stall;
    /// - frames the reset's flush puts on the socket went out: a timeout;
    /// - frames already past HTTP/2, waiting in TLS's or the socket's writes (a server not reading),
    ///   would still go out, before the reset, if the socket drained. Nothing can say which did: TLS
    ///   completes every write of a flush with one result, even when part of it was sent. A timeout.
    private func expire(_ streamID: HTTP2StreamID) {
        guard let stream = streams[streamID] else { return }
        let reset = HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))
        if stream.written {
            take(streamID)?.reply.fail(APNsTransportError(.timeout, "no answer by the deadline"))
            context?.writeAndFlush(wrapOutboundOut(reset), promise: nil)
            return
        }
        usage.retire()
        streams[streamID]?.expired = true
        context?.writeAndFlush(wrapOutboundOut(reset), promise: nil)
        // Still here: neither dropped by NIO nor written by that flush.
        take(streamID)?.reply.fail(APNsTransportError(.timeout, "not completely written by the deadline, but queued for the socket: it may still reach APNs"))
    }

    // MARK: Answers

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            guard streams[frame.streamID] != nil else { return }
            streams[frame.streamID]!.noteHeaders(headers.headers)
            if headers.endStream { finish(frame.streamID) }
        case .data(let data):
            guard streams[frame.streamID] != nil else { return }
            if case .byteBuffer(let buffer) = data.data { streams[frame.streamID]!.keep(buffer) }
            if data.endStream { finish(frame.streamID) }
        case .goAway(let last, _, _):
            // NIO then closes every stream after `last` (a StreamClosedEvent each).
            goAway.note(lastStreamID: last)
        default:
            break
        }
    }

    /// The connection's inbound window as NIO counts it (every DATA frame read, those of streams
    /// already reset or refused too, which never reach this handler): given back to its initial
    /// 65,535 bytes once half of it is used, as NIO's multiplexer does.
    private func windowChanged(to size: Int, context: ChannelHandlerContext) {
        let target = 65_535
        guard size <= target / 2 else { return }
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: target - size))), promise: nil)
    }

    /// The stream's request, no longer waiting (its deadline cancelled): `nil` if it already ended.
    private func take(_ streamID: HTTP2StreamID) -> Stream? {
        let stream = streams.removeValue(forKey: streamID)
        stream?.deadline?.cancel()
        return stream
    }

    private func finish(_ streamID: HTTP2StreamID) {
        guard let stream = take(streamID) else { return }
        guard let status = stream.status else {
            return stream.reply.fail(APNsTransportError(.lost, "an answer without :status"))
        }
        stream.reply.succeed(APNsReply(status: status, requestID: stream.requestID, channelID: stream.channelID, uniqueID: stream.uniqueID, body: stream.body))
    }

    private func fail(_ streamID: HTTP2StreamID, _ error: APNsTransportError) {
        take(streamID)?.reply.fail(error)
    }

    /// Why a stream ended without an answer: not processed if it was refused (REFUSED_STREAM, or
    /// past a GOAWAY's last stream), else possibly delivered.
    private func ended(_ streamID: HTTP2StreamID, refused: Bool, _ detail: String) -> APNsTransportError {
        APNsTransportError(refused || goAway.processed(streamID) == false ? .notProcessed : .lost, detail)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream, let size = window.inboundWindowSize {
            windowChanged(to: size, context: context)
        } else if let closed = event as? StreamClosedEvent, streams[closed.streamID] != nil {
            let detail = closed.reason.map { "stream closed without an answer (\($0))" } ?? "stream closed without an answer"
            fail(closed.streamID, ended(closed.streamID, refused: closed.reason == .refusedStream, detail))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        failAll()
        context.fireChannelInactive()
    }

    /// The pipeline torn down (after the connection closed, or without it ever opening): no
    /// request is left waiting, and none is started.
    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        failAll()
    }

    private func failAll() {
        for streamID in Array(streams.keys) {
            fail(streamID, ended(streamID, refused: false, "connection closed without an answer"))
        }
    }
}

extension APNsStreams.Stream {
    /// The answer's first HEADERS carry its status and ids; trailers add nothing.
    fileprivate mutating func noteHeaders(_ headers: HPACKHeaders) {
        guard status == nil else { return }
        status = headers.first(name: ":status").flatMap { Int($0) }
        requestID = headers.first(name: "apns-id") ?? headers.first(name: "apns-request-id")
        channelID = headers.first(name: "apns-channel-id")
        uniqueID = headers.first(name: "apns-unique-id")
    }

    /// Keeps the body up to its bound.
    fileprivate mutating func keep(_ buffer: ByteBuffer) {
        guard body.count < maximumBody else { return }
        body += buffer.readableBytesView.prefix(maximumBody - body.count)
    }
}

extension EventLoopPromise {
    /// Fails the promise with `error` at `deadline` unless it completed before.
    func fail(_ error: any Error, at deadline: NIODeadline) {
        let timeout = futureResult.eventLoop.scheduleTask(deadline: deadline) { self.fail(error) }
        futureResult.whenComplete { _ in timeout.cancel() }
    }
}
