import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import Testing
@testable import APNsDispatcher

/// ``APNsStreams`` alone on an embedded channel: the frames it writes for requests, what it makes
/// of the frames it reads, and its deadlines on the embedded loop's clock (no sleeping).
@Suite("A connection's streams, as frames on its pipeline")
struct StreamsTests {
    /// The handler on an embedded channel, and the connection's usage it reports to.
    struct Harness {
        let channel = EmbeddedChannel()
        let usage = ConnectionUsage()
        let streams: APNsStreams
        var loop: EmbeddedEventLoop { channel.embeddedEventLoop }

        /// `below`: a handler between the streams and the channel (the socket's side).
        init(firstStreamID: HTTP2StreamID = 1, below: (any ChannelHandler)? = nil) throws {
            streams = APNsStreams(usage: usage, firstStreamID: firstStreamID)
            if let below { try channel.pipeline.syncOperations.addHandler(below) }
            try channel.pipeline.syncOperations.addHandler(streams)
            _ = try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        }

        /// Starts a request (a push: HEADERS and a body) whose deadline is `seconds` from the loop's now.
        func start(body: String? = "{}", maximumBody: Int = APNsReply.maximumPushBody, seconds: Int64 = 10) -> EventLoopFuture<APNsReply> {
            let reply = loop.makePromise(of: APNsReply.self)
            let headers: HPACKHeaders = [":method": "POST", ":path": "/3/device/ab"]
            streams.start(.init(headers: headers, body: body.map { ByteBuffer(string: $0) }, maximumBody: maximumBody, deadline: loop.now + .seconds(seconds), reply: reply))
            return reply.futureResult
        }

        /// What the handler wrote, once the loop ran its enqueued flush.
        func written() throws -> [HTTP2Frame] {
            loop.run()
            var frames: [HTTP2Frame] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
            return frames
        }

        func answer(_ streamID: HTTP2StreamID, status: Int, body: [Int] = [], apnsID: String? = nil, uniqueID: String? = nil) throws {
            var headers: HPACKHeaders = [":status": String(status)]
            if let apnsID { headers.add(name: "apns-id", value: apnsID) }
            if let uniqueID { headers.add(name: "apns-unique-id", value: uniqueID) }
            try channel.writeInbound(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: body.isEmpty))))
            for (index, size) in body.enumerated() {
                let data = HTTP2Frame.FramePayload.Data(data: .byteBuffer(ByteBuffer(repeating: UInt8(ascii: "x"), count: size)), endStream: index == body.count - 1)
                try channel.writeInbound(HTTP2Frame(streamID: streamID, payload: .data(data)))
            }
        }

        /// The error a reply failed with.
        func failure(_ reply: EventLoopFuture<APNsReply>) -> APNsTransportError? {
            var error: APNsTransportError?
            reply.assumeIsolated().whenFailure { error = $0 as? APNsTransportError }
            return error
        }
    }

    @Test("requests take client stream ids in order (1, 3, 5); each gets its own answer, with its status, apns-id, apns-unique-id and body")
    func streamIDsAndAnswers() throws {
        let harness = try Harness()
        let first = harness.start(), second = harness.start(), third = harness.start(body: nil)
        let frames = try harness.written()
        #expect(frames.map(\.streamID) == [1, 1, 3, 3, 5])
        try #require(frames.count == 5)
        guard case .headers(let headers) = frames[4].payload else { Issue.record("no HEADERS"); return }
        #expect(headers.endStream, "a request without a body ends its stream with its HEADERS")
        try harness.answer(3, status: 410, body: [60], apnsID: "b")
        try harness.answer(1, status: 200, apnsID: "a", uniqueID: "u-1")
        try harness.answer(5, status: 204)
        #expect(try first.wait().status == 200)
        #expect(try first.wait().requestID == "a")
        #expect(try first.wait().uniqueID == "u-1")
        #expect(try second.wait().uniqueID == nil)
        #expect(try second.wait().status == 410)
        #expect(try second.wait().body.count == 60)
        #expect(try third.wait().status == 204)
    }

    @Test("a push's answer keeps at most 4 KB of body (a server sending megabytes costs no memory), a channel list up to 1 MB")
    func bounded() throws {
        let harness = try Harness()
        let push = harness.start(), small = harness.start(), list = harness.start(body: nil, maximumBody: APNsReply.maximumManagementBody)
        try harness.answer(1, status: 400, body: [16_384, 16_384, 16_384])
        try harness.answer(3, status: 400, body: [100])
        try harness.answer(5, status: 200, body: Array(repeating: 16_384, count: 10))
        #expect(try push.wait().body.count == 4_096)
        #expect(try small.wait().body.count == 100)
        #expect(try list.wait().body.count == 163_840)
    }

    @Test("requests started in one turn of the event loop are flushed together, once")
    func oneFlush() throws {
        let harness = try Harness()
        let flushes = FlushCounter()
        try harness.channel.pipeline.syncOperations.addHandler(flushes, position: .first)
        for _ in 0..<10 { _ = harness.start() }
        #expect(flushes.count == 0)
        #expect(try harness.written().count == 20)
        #expect(flushes.count == 1)
        _ = harness.start()
        _ = try harness.written()
        #expect(flushes.count == 2)
    }

    @Test("the connection's window is given back as NIO reports it used (half of 65,535), not before")
    func connectionWindow() throws {
        let harness = try Harness()
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 40_000, outboundWindowSize: 65_535))
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: 1, inboundWindowSize: 1_000, outboundWindowSize: 65_535))
        #expect(try harness.written().isEmpty)
        harness.channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 30_000, outboundWindowSize: 65_535))
        let updates = try harness.written()
        #expect(updates.map(\.streamID) == [.rootStream])
        guard case .windowUpdate(let increment)? = updates.first?.payload else { Issue.record("no WINDOW_UPDATE"); return }
        #expect(increment == 35_535)
    }

    @Test("with NIO's HTTP/2 on both sides: bodies answering streams already reset (never seen by the handler) still have their window given back, so later answers arrive (a review found the window leaking)")
    func windowOfResetStreams() throws {
        let client = EmbeddedChannel(), server = EmbeddedChannel()
        let streams = APNsStreams(usage: ConnectionUsage())
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        settings.initialSettings = [HTTP2Setting(parameter: .initialWindowSize, value: APNsStreams.streamWindow)]
        try client.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .client, connectionConfiguration: settings))
        try client.pipeline.syncOperations.addHandler(streams)
        try server.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server))
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: 443)
        _ = try client.connect(to: address).wait()
        _ = try server.connect(to: address).wait()
        func carry() throws {
            client.embeddedEventLoop.run()
            for _ in 0..<4 {
                while let bytes = try client.readOutbound(as: ByteBuffer.self) { try server.writeInbound(bytes) }
                while let bytes = try server.readOutbound(as: ByteBuffer.self) { try client.writeInbound(bytes) }
            }
            while (try? server.readInbound(as: HTTP2Frame.self)) ?? nil != nil {}
        }
        func start(seconds: Int64) -> EventLoopFuture<APNsReply> {
            let reply = client.embeddedEventLoop.makePromise(of: APNsReply.self)
            let headers: HPACKHeaders = [":method": "POST", ":scheme": "https", ":authority": "apns", ":path": "/3/device/ab"]
            let deadline = client.embeddedEventLoop.now + .seconds(seconds)
            streams.start(.init(headers: headers, body: ByteBuffer(string: "{}"), maximumBody: APNsReply.maximumPushBody, deadline: deadline, reply: reply))
            return reply.futureResult
        }
        func answer(_ streamID: HTTP2StreamID, bodySize: Int) {
            server.write(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: [":status": "400"]))), promise: nil)
            let body = ByteBuffer(repeating: UInt8(ascii: "x"), count: bodySize)
            server.writeAndFlush(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true))), promise: nil)
        }
        try carry()  // the prefaces and SETTINGS
        // Eight answers of 16,000 bytes, each read after the client reset its stream at the
        // deadline: 128,000 bytes, twice the connection's initial window.
        for round in 0..<8 {
            let streamID = HTTP2StreamID(2 * round + 1)
            let late = start(seconds: 1)
            try carry()
            answer(streamID, bodySize: 16_000)
            client.embeddedEventLoop.advanceTime(by: .seconds(1))
            #expect(try late.map { _ in false }.recover { ($0 as? APNsTransportError)?.kind == .timeout }.wait())
            try carry()
        }
        let last = start(seconds: 10)
        try carry()
        answer(HTTP2StreamID(17), bodySize: 100)
        try carry()
        var body: Int?
        last.assumeIsolated().whenSuccess { body = $0.body.count }
        #expect(body == 100, "the last answer's body came through the connection's window")
    }

    @Test("at its deadline a written request fails as a timeout (ambiguous) and its stream is reset; the others go on; a late answer is ignored")
    func deadline() throws {
        let harness = try Harness()
        let slow = harness.start(seconds: 1), patient = harness.start(seconds: 5)
        _ = try harness.written()
        harness.loop.advanceTime(by: .seconds(1))
        let error = harness.failure(slow)
        #expect(error?.kind == .timeout)
        #expect(error?.isAmbiguous == true)
        let reset = try harness.written()
        #expect(reset.count == 1)
        #expect(reset.first?.streamID == 1)
        if case .rstStream(let code)? = reset.first?.payload { #expect(code == .cancel) } else { Issue.record("no RST_STREAM") }
        #expect(!harness.usage.isRetired, "a timeout after the request was written does not retire the connection")
        try harness.answer(1, status: 200)
        try harness.answer(3, status: 200)
        #expect(try patient.wait().status == 200)
        harness.loop.advanceTime(by: .seconds(10))
        #expect(try harness.written().isEmpty, "an answered stream is never reset")
    }

    @Test("at its deadline a request stuck in TLS's or the socket's writes (a server not reading) fails as possibly delivered (it may still go out, before its reset); the connection is retired, its written request still waits")
    func stuckInTheSocket() throws {
        let socket = HeldWrites()
        let harness = try Harness(below: socket)
        let written = harness.start(seconds: 5)
        _ = try harness.written()
        socket.holding = true
        let stuck = harness.start(seconds: 1)
        harness.loop.run()
        harness.loop.advanceTime(by: .seconds(1))
        let error = harness.failure(stuck)
        #expect(error?.kind == .timeout)
        #expect(error?.isAmbiguous == true)
        #expect(harness.usage.isRetired)
        #expect(harness.channel.isActive)
        socket.holding = false
        try harness.answer(1, status: 200)
        #expect(try written.wait().status == 200)
    }

    @Test("at its deadline a request whose frames go out with the reset's flush fails as a timeout (ambiguous), not a stall; the connection is retired, not closed (a review found such a request called not processed)")
    func writtenWithTheReset() throws {
        let socket = HeldWrites()
        let harness = try Harness(below: socket)
        socket.holding = true
        let late = harness.start(seconds: 1)
        harness.loop.run()
        socket.holding = false  // the socket drains: the next flush, the reset's, writes everything
        harness.loop.advanceTime(by: .seconds(1))
        let error = harness.failure(late)
        #expect(error?.kind == .timeout)
        #expect(error?.isAmbiguous == true)
        #expect(harness.channel.isActive)
        #expect(harness.usage.isRetired)
        let frames = try harness.written()
        #expect(frames.count == 3, "HEADERS, DATA, then RST_STREAM")
        if case .rstStream(.cancel)? = frames.last?.payload {} else { Issue.record("no RST_STREAM last: \(frames)") }
    }

    @Test("with NIO's HTTP/2 on both sides: at its deadline a body waiting for flow-control window is dropped by the reset, unsent, and fails as not processed")
    func noWindow() throws {
        let pair = try NoWindowPair()
        let (client, server, usage, streams) = (pair.client, pair.server, pair.usage, pair.streams)
        var received: [HTTP2Frame] = []
        func carry() throws { received += try pair.carry() }
        try carry()  // the prefaces and SETTINGS: streams get no window
        let reply = client.embeddedEventLoop.makePromise(of: APNsReply.self)
        let headers: HPACKHeaders = [":method": "POST", ":scheme": "https", ":authority": "apns", ":path": "/3/device/ab"]
        let deadline = client.embeddedEventLoop.now + .seconds(1)
        streams.start(.init(headers: headers, body: ByteBuffer(string: "{}"), maximumBody: APNsReply.maximumPushBody, deadline: deadline, reply: reply))
        try carry()
        client.embeddedEventLoop.advanceTime(by: .seconds(1))
        try carry()
        #expect(try reply.futureResult.map { _ in nil }.recover { ($0 as? APNsTransportError)?.kind }.wait() == .stalled)
        #expect(client.isActive, "nothing is stuck in the socket: the connection is only retired")
        #expect(usage.isRetired)
        let kinds = received.compactMap { frame -> String? in
            switch frame.payload {
            case .headers: "headers"
            case .data: "data"
            case .rstStream: "reset"
            default: nil
            }
        }
        #expect(kinds == ["headers", "reset"], "the body never reached the server")
    }

    @Test("with NIO's HTTP/2 on both sides: a GOAWAY whose last stream id is before a request whose body waits for window: not processed (NIO fails the dropped write before it hands the GOAWAY on; it came out possibly delivered)")
    func goAwayBeforeTheBodyLeft() throws {
        let pair = try NoWindowPair()
        let (client, server, usage, streams) = (pair.client, pair.server, pair.usage, pair.streams)
        func carry() throws {
            _ = try pair.carry()
            client.embeddedEventLoop.run()
        }
        try carry()  // the prefaces and SETTINGS: streams get no window
        let reply = client.embeddedEventLoop.makePromise(of: APNsReply.self)
        let headers: HPACKHeaders = [":method": "POST", ":scheme": "https", ":authority": "apns", ":path": "/3/device/ab"]
        streams.start(
            .init(headers: headers, body: ByteBuffer(string: "{}"), maximumBody: APNsReply.maximumPushBody,
                deadline: client.embeddedEventLoop.now + .seconds(10), reply: reply))
        try carry()  // its HEADERS go out; its body waits for window
        server.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 0, errorCode: .noError, opaqueData: nil)), promise: nil)
        try carry()
        #expect(try reply.futureResult.map { _ in nil }.recover { ($0 as? APNsTransportError)?.kind }.wait() == .notProcessed)
    }

    @Test("a stream reset by the server fails as possibly delivered; one refused (REFUSED_STREAM) as not processed")
    func resetStreams() throws {
        let harness = try Harness()
        let reset = harness.start(), refused = harness.start()
        harness.channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: 1, reason: .internalError))
        harness.channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: 3, reason: .refusedStream))
        #expect(harness.failure(reset)?.kind == .lost)
        #expect(harness.failure(refused)?.kind == .notProcessed)
    }

    @Test("GOAWAY: streams after its last stream id are not processed, earlier ones still answer; new requests fail at once as not processed")
    func goAway() throws {
        let harness = try Harness()
        let processed = harness.start(), beyond = harness.start()
        try harness.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: nil)))
        #expect(harness.usage.goAway.received)
        // NIO closes the streams past the GOAWAY's last id with CANCEL: the GOAWAY says they were not processed.
        harness.channel.pipeline.fireUserInboundEventTriggered(StreamClosedEvent(streamID: 3, reason: .cancel))
        #expect(harness.failure(beyond)?.kind == .notProcessed)
        let after = harness.start()
        #expect(harness.failure(after)?.kind == .notProcessed)
        try harness.answer(1, status: 200)
        #expect(try processed.wait().status == 200)
    }

    @Test("the connection closing fails every request still waiting as possibly delivered; a request after that fails at once")
    func connectionClosed() throws {
        let harness = try Harness()
        let waiting = [harness.start(), harness.start()]
        _ = try harness.written()
        harness.channel.pipeline.fireChannelInactive()
        #expect(waiting.map { harness.failure($0)?.kind } == [.lost, .lost])
        #expect(harness.failure(harness.start())?.kind == .lost)
    }

    @Test("stream ids used up (the last is 2^31 - 1): the next request fails as not processed, unwritten, and the connection is retired")
    func streamIDsUsedUp() throws {
        let harness = try Harness(firstStreamID: HTTP2StreamID(Int32.max - 2))
        let last = [harness.start(), harness.start()]
        #expect(try harness.written().map(\.streamID) == [HTTP2StreamID(Int32.max - 2), HTTP2StreamID(Int32.max - 2), .maxID, .maxID])
        #expect(!harness.usage.isRetired)
        let beyond = harness.start()
        #expect(harness.failure(beyond)?.kind == .notProcessed)
        #expect(harness.usage.isRetired)
        #expect(try harness.written().isEmpty)
        try harness.answer(.maxID, status: 200)
        #expect(try last[1].wait().status == 200)
    }
}

/// Counts the flushes that pass it.
private final class FlushCounter: ChannelOutboundHandler {
    typealias OutboundIn = Any
    var count = 0

    func flush(context: ChannelHandlerContext) {
        count += 1
        context.flush()
    }
}

/// A socket that may stop draining: while `holding`, writes are kept (their promises pending) and
/// flushes pass nothing; a flush while not holding writes everything kept; closing fails what is kept.
private final class HeldWrites: ChannelOutboundHandler {
    typealias OutboundIn = Any
    var holding = false
    private var kept: [(NIOAny, EventLoopPromise<Void>?)] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        kept.append((data, promise))
    }

    func flush(context: ChannelHandlerContext) {
        guard !holding else { return }
        for (data, promise) in kept { context.write(data, promise: promise) }
        kept = []
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        let failed = kept
        kept = []
        for (_, promise) in failed { promise?.fail(ChannelError.ioOnClosedChannel) }
        context.close(mode: mode, promise: promise)
    }
}

/// A client channel with ``APNsStreams`` over NIO's HTTP/2 and a server channel with NIO's HTTP/2
/// that gives streams no flow-control window, connected in memory.
struct NoWindowPair {
    let client = EmbeddedChannel(), server = EmbeddedChannel()
    let usage = ConnectionUsage()
    let streams: APNsStreams

    init() throws {
        streams = APNsStreams(usage: usage)
        try client.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .client))
        try client.pipeline.syncOperations.addHandler(streams)
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        settings.initialSettings = [HTTP2Setting(parameter: .initialWindowSize, value: 0)]
        try server.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: settings))
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: 443)
        _ = try client.connect(to: address).wait()
        _ = try server.connect(to: address).wait()
    }

    /// Runs the client's loop and carries the bytes both ways until they settle; returns the
    /// frames the server read.
    func carry() throws -> [HTTP2Frame] {
        client.embeddedEventLoop.run()
        for _ in 0..<4 {
            while let bytes = try client.readOutbound(as: ByteBuffer.self) { try server.writeInbound(bytes) }
            while let bytes = try server.readOutbound(as: ByteBuffer.self) { try client.writeInbound(bytes) }
        }
        var received: [HTTP2Frame] = []
        while let frame = try server.readInbound(as: HTTP2Frame.self) { received.append(frame) }
        return received
    }
}
