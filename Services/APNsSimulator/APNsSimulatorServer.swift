import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import ServiceLifecycle
import Synchronization

/// An HTTP/2 + TLS server that speaks the APNs provider API for Live Activity pushes: validates
/// like APNs, injects faults on command, and records what it accepted (``SimulatorState``).
public final class APNsSimulatorServer: Service, Sendable {
    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port (``listeningPort`` tells which).
        public var port: Int
        /// The keys provider tokens must be signed with.
        public var keys: [ProviderTokenVerifier.Key]
        public var tls: SimulatorTLS
        /// `SETTINGS_MAX_CONCURRENT_STREAMS` the server announces (APNs announces 1,000 once a
        /// connection has a valid token).
        public var maxConcurrentStreams: Int
        /// The clock the server judges tokens by (tests move it).
        public var now: @Sendable () -> Date

        public init(
            host: String = "127.0.0.1", port: Int = 0, keys: [ProviderTokenVerifier.Key], tls: SimulatorTLS, maxConcurrentStreams: Int = 1_000,
            now: @escaping @Sendable () -> Date = Date.init
        ) {
            self.host = host
            self.port = port
            self.keys = keys
            self.tls = tls
            self.maxConcurrentStreams = maxConcurrentStreams
            self.now = now
        }
    }

    public let state: SimulatorState
    private let configuration: Configuration
    private let logger: Logger
    private let boundPort = Mutex<Int?>(nil)
    private let started = Mutex<[CheckedContinuation<Int, any Error>]?>([])

    public init(configuration: Configuration, state: SimulatorState = SimulatorState(), logger: Logger) {
        self.configuration = configuration
        self.state = state
        self.logger = logger
    }

    /// The port the server listens on, once it does.
    public var listeningPort: Int {
        get async throws {
            if let port = boundPort.withLock({ $0 }) { return port }
            return try await withCheckedThrowingContinuation { continuation in
                let ready = started.withLock { waiters -> Bool in
                    guard waiters != nil else { return true }
                    waiters!.append(continuation)
                    return false
                }
                if ready {
                    if let port = boundPort.withLock({ $0 }) { continuation.resume(returning: port) } else {
                        continuation.resume(throwing: ChannelError.ioOnClosedChannel)
                    }
                }
            }
        }
    }

    public func run() async throws {
        let sslContext = try NIOSSLContext(configuration: configuration.tls.serverConfiguration())
        let state = self.state
        let verifier = ProviderTokenVerifier(keys: configuration.keys)
        let now = configuration.now
        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: configuration.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
            HTTP2Setting(parameter: .initialWindowSize, value: 1 << 20),
        ]
        let streamConfiguration = NIOHTTP2Handler.StreamConfiguration()
        let logger = self.logger

        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                let connection = ConnectionContext(id: state.newConnection())
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .server, connectionConfiguration: connectionConfiguration, streamConfiguration: streamConfiguration
                    ) { stream in
                        stream.eventLoop.makeCompletedFuture {
                            try stream.pipeline.syncOperations.addHandlers([
                                HTTP2FramePayloadToHTTP1ServerCodec(),
                                APNsStreamHandler(connection: connection, state: state, verifier: verifier, now: now, logger: logger),
                            ])
                        }
                    }
                }
            }
            .bind(host: configuration.host, port: configuration.port).get()

        let port = channel.localAddress?.port ?? configuration.port
        boundPort.withLock { $0 = port }
        for waiter in started.withLock({ waiters -> [CheckedContinuation<Int, any Error>] in
            defer { waiters = nil }
            return waiters ?? []
        }) {
            waiter.resume(returning: port)
        }
        logger.info("APNs simulator listening", metadata: ["apns.port": "\(port)"])
        try await withGracefulShutdownHandler {
            try await withTaskCancellationHandler {
                try await channel.closeFuture.get()
            } onCancel: {
                channel.close(promise: nil)
            }
        } onGracefulShutdown: {
            channel.close(promise: nil)
        }
    }
}

/// One HTTP/2 connection's state: its id and the provider token in use on it.
final class ConnectionContext: Sendable {
    let id: Int
    let token = Mutex(ConnectionTokenState())
    init(id: Int) { self.id = id }
}

/// Answers one HTTP/2 stream: one provider API request.
final class APNsStreamHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let connection: ConnectionContext
    private let state: SimulatorState
    private let verifier: ProviderTokenVerifier
    private let now: @Sendable () -> Date
    private let logger: Logger
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var oversize = false

    init(connection: ConnectionContext, state: SimulatorState, verifier: ProviderTokenVerifier, now: @escaping @Sendable () -> Date, logger: Logger) {
        self.connection = connection
        self.state = state
        self.verifier = verifier
        self.now = now
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(let buffer):
            // Keep at most one byte more than the limit: enough to know it is too large.
            if body.count + buffer.readableBytes <= NotificationValidator.maximumPayloadBytes + 1 {
                body += buffer.readableBytesView
            } else {
                oversize = true
            }
        case .end:
            respond(context: context)
        }
    }

    private func respond(context: ChannelHandlerContext) {
        guard let head else { return }
        var headers: [String: String] = [:]
        for (name, value) in head.headers { headers[name.lowercased()] = value }
        if oversize { body = Array(repeating: 0x20, count: NotificationValidator.maximumPayloadBytes + 1) }
        let request = NotificationValidator.Request(method: head.method.rawValue, path: head.uri, headers: headers, body: body)
        let now = self.now()

        // The request line and the provider token first, as APNs checks them.
        let token: String
        switch NotificationValidator.token(of: request) {
        case .failure(let rejection): return reject(rejection, context: context)
        case .success(let value): token = value
        }
        switch verifier.verify(authorization: headers["authorization"], now: now) {
        case .failure(let failure): return reject(APNsRejection(403, failure.reason), context: context)
        case .success:
            let jwt = headers["authorization"] ?? ""
            guard connection.token.withLock({ $0.admit(jwt, now: now) }) else {
                return reject(APNsRejection(429, "TooManyProviderTokenUpdates"), context: context)
            }
        }
        let streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) } ?? 0
        let notification: AcceptedNotification
        switch NotificationValidator.validate(request, token: token, now: now, connection: connection.id, stream: streamID) {
        case .failure(let rejection): return reject(rejection, context: context)
        case .success(let value): notification = value
        }

        guard let fault = state.takeFault(for: token) else {
            state.record(notification)
            return accept(notification, context: context)
        }
        switch fault.kind {
        case .reject:
            let timestamp = fault.status == 410 ? Date(timeIntervalSince1970: Double(fault.timestampMilliseconds ?? Int64(now.timeIntervalSince1970 * 1_000)) / 1_000) : nil
            reject(APNsRejection(fault.status ?? 500, fault.reason ?? "InternalServerError", timestamp: timestamp), context: context)
        case .delay:
            state.record(notification)
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(Int64(fault.delayMilliseconds ?? 1_000))) {
                let (handler, context) = loopBound.value
                handler.accept(notification, context: context)
            }
        case .stall:
            state.record(notification)
            state.count { $0.stalled += 1 }
        case .goAway:
            state.count { $0.goAways += 1 }
            guard let parent = context.channel.parent else { return }
            // This stream and every later one were not processed; earlier ones were.
            let last = HTTP2StreamID(max(0, streamID - 2))
            parent.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)))
                .whenComplete { _ in
                    parent.eventLoop.scheduleTask(in: .milliseconds(50)) { parent.close(promise: nil) }
                }
        case .reset:
            state.count { $0.resets += 1 }
            context.channel.parent?.close(promise: nil)
        }
    }

    private func accept(_ notification: AcceptedNotification, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "apns-id", value: notification.apnsID)
        headers.add(name: "apns-unique-id", value: UUID().uuidString.lowercased())
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: .ok, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    private func reject(_ rejection: APNsRejection, context: ChannelHandlerContext) {
        state.rejected(rejection)
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/json")
        if let apnsID = head?.headers.first(name: "apns-id") { headers.add(name: "apns-id", value: apnsID) }
        let body = rejection.body
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: HTTPResponseStatus(statusCode: rejection.status), headers: headers))),
            promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}
