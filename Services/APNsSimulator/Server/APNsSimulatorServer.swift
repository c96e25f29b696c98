import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOHTTP1
import NIOHPACK
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
        /// The environment the server plays, for keys limited to one (`nil`: either, as one
        /// simulator usually stands for both).
        public var environment: APNsEnvironment?
        public var tls: SimulatorTLS
        /// `SETTINGS_MAX_CONCURRENT_STREAMS` the server announces (APNs announces 1,000 once a
        /// connection has a valid token).
        public var maxConcurrentStreams: Int
        /// The clock the server judges tokens by (tests move it).
        /// What the simulator takes for now (provider tokens' age, apns-expiration).
        public var clock: any WallClock

        public init(
            host: String = "127.0.0.1", port: Int = 0, keys: [ProviderTokenVerifier.Key], tls: SimulatorTLS, maxConcurrentStreams: Int = 1_000,
            clock: any WallClock = SystemWallClock(), environment: APNsEnvironment? = nil
        ) {
            self.environment = environment
            self.host = host
            self.port = port
            self.keys = keys
            self.tls = tls
            self.maxConcurrentStreams = maxConcurrentStreams
            self.clock = clock
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
        let verifier = try await ProviderTokenVerifier(keys: configuration.keys)
        let clock = configuration.clock
        let environment = configuration.environment
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
                            try stream.pipeline.syncOperations.addHandler(
                                APNsStreamHandler(
                                    connection: connection, state: state, verifier: verifier, clock: clock, environment: environment, logger: logger))
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
    private let token = Mutex(ConnectionTokenState())
    /// The last token that verified on this connection, and its `iat`: the same token is not
    /// verified (ECDSA) again on every request, only its age is checked.
    private let verified = Mutex<(authorization: String, issuedAt: Date, keyID: String)?>(nil)

    /// The key of the token that last verified on this connection (the one its requests carry).
    var keyID: String? { verified.withLock { $0?.keyID } }
    /// Verifications under way, by authorization header.
    private let pending = Mutex<[String: EventLoopFuture<Result<ProviderTokenVerifier.Verified, ProviderTokenVerifier.Failure>>]>([:])

    init(id: Int) { self.id = id }

    /// The answer APNs gives for this provider token on this connection when it is the token that
    /// last verified here (`.some(nil)`: fine), or `nil` when it must be verified first.
    func knownVerdict(_ authorization: String?, now: Date) -> APNsRejection?? {
        guard let authorization, let cached = verified.withLock({ $0 }), cached.authorization == authorization else { return nil }
        return .some(now.timeIntervalSince(cached.issuedAt) > ProviderTokenVerifier.maximumAge ? APNsRejection(403, "ExpiredProviderToken") : nil)
    }

    /// The verification of `authorization` on this connection: one at a time per token, shared by
    /// every stream that carries it meanwhile, so that their answers keep their arrival order.
    func verification(
        of authorization: String?, verifier: ProviderTokenVerifier, now: Date, on eventLoop: any EventLoop
    ) -> EventLoopFuture<Result<ProviderTokenVerifier.Verified, ProviderTokenVerifier.Failure>> {
        let key = authorization ?? ""
        let (running, started) = pending.withLock { pending in
            if let running = pending[key] { return (running, false) }
            let running = eventLoop.makeFutureWithTask { await verifier.verify(authorization: authorization, now: now) }
            pending[key] = running
            return (running, true)
        }
        // Registered before the streams' own callbacks, so it runs first (on the same loop).
        if started { running.whenComplete { _ in self.pending.withLock { _ = $0.removeValue(forKey: key) } } }
        return running
    }

    /// The answer APNs gives once the token has been verified (`verdict`), or `nil` when it is fine.
    func admit(_ authorization: String?, verdict: Result<ProviderTokenVerifier.Verified, ProviderTokenVerifier.Failure>, now: Date) -> APNsRejection? {
        switch verdict {
        case .failure(let failure):
            return APNsRejection(403, failure.reason)
        case .success(let token):
            let authorization = authorization ?? ""
            guard self.token.withLock({ $0.admit(authorization, now: now) }) else { return APNsRejection(429, "TooManyProviderTokenUpdates") }
            verified.withLock { $0 = (authorization, token.issuedAt, token.keyID) }
            return nil
        }
    }
}

/// Answers one HTTP/2 stream: one provider API request. Works on HTTP/2 frames directly, as APNs
/// answers: a 200 is one HEADERS frame ending the stream; an error is HEADERS, then the JSON body
/// in one DATA frame ending it.
final class APNsStreamHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let connection: ConnectionContext
    private let state: SimulatorState
    private let verifier: ProviderTokenVerifier
    private let clock: any WallClock
    /// The environment the server plays (`nil`: either).
    private let environment: APNsEnvironment?
    private let logger: Logger
    private var headers: HPACKHeaders?
    private var body: [UInt8] = []
    private var oversize = false
    private var answered = false
    /// The payload limit of the request's path.
    private var limit = NotificationValidator.maximumPayloadBytes

    init(
        connection: ConnectionContext, state: SimulatorState, verifier: ProviderTokenVerifier, clock: any WallClock,
        environment: APNsEnvironment? = nil, logger: Logger
    ) {
        self.environment = environment
        self.connection = connection
        self.state = state
        self.verifier = verifier
        self.clock = clock
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            if headers == nil {
                headers = frame.headers
                if frame.headers.first(name: ":path").map(BroadcastValidator.isBroadcastAPI) == true { limit = BroadcastValidator.maximumPayloadBytes }
            }
            if frame.endStream { respond(context: context) }
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data {
                // Keep at most one byte more than the limit: enough to know it is too large.
                if body.count + buffer.readableBytes <= limit + 1 {
                    body += buffer.readableBytesView
                } else {
                    oversize = true
                }
            }
            if frame.endStream { respond(context: context) }
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("stream error", metadata: ["error": "\(error)", "apns.connection": "\(connection.id)"])
        context.close(promise: nil)
    }

    private func respond(context: ChannelHandlerContext) {
        guard let requestHeaders = headers, !answered else { return }
        answered = true
        var fields: [String: String] = [:]
        var method = "", path = ""
        for (name, value, _) in requestHeaders {
            switch name {
            case ":method": method = value
            case ":path": path = value
            default: if !name.hasPrefix(":") { fields[name.lowercased()] = value }
            }
        }
        if oversize { body = Array(repeating: 0x20, count: limit + 1) }
        let request = NotificationValidator.Request(method: method, path: path, headers: fields, body: body)
        let now = clock.date

        // The request line and the provider token first, as APNs checks them. The broadcast API
        // names its requests with apns-request-id, the token path with apns-id.
        let target: Target
        let id: (name: String, value: String?)
        if BroadcastValidator.isBroadcastAPI(path) {
            id = ("apns-request-id", fields["apns-request-id"])
            switch BroadcastValidator.route(request) {
            case .failure(let rejection): return reject(rejection, id: id, context: context)
            case .success(let route): target = .broadcastAPI(route)
            }
        } else {
            id = ("apns-id", fields["apns-id"])
            switch NotificationValidator.token(of: request) {
            case .failure(let rejection): return reject(rejection, id: id, context: context)
            case .success(let token): target = .device(token)
            }
        }
        let authorization = fields["authorization"]
        if let known = connection.knownVerdict(authorization, now: now) {
            if let rejection = known { return reject(rejection, id: id, context: context) }
            return answer(request, target: target, fields: fields, now: now, context: context)
        }
        // A token not seen on this connection yet: its signature is checked off the event loop,
        // and the answer is written back on it.
        let verifier = self.verifier
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        connection.verification(of: authorization, verifier: verifier, now: now, on: context.eventLoop).whenSuccess { verdict in
            let (handler, context) = loopBound.value
            if let rejection = handler.connection.admit(authorization, verdict: verdict, now: now) {
                return handler.reject(rejection, id: id, context: context)
            }
            handler.answer(request, target: target, fields: fields, now: now, context: context)
        }
    }

    /// What a request is for, once its request line was read.
    private enum Target {
        /// A push to this device token (`/3/device/<token>`).
        case device(String)
        /// The broadcast API: a broadcast, or a channel management request.
        case broadcastAPI(BroadcastValidator.Route)
    }

    private func answer(_ request: NotificationValidator.Request, target: Target, fields: [String: String], now: Date, context: ChannelHandlerContext) {
        // The key's limits (scoped keys): its environment, its topics.
        let bundleID: String? =
            switch target {
            case .device:
                fields["apns-topic"].map { topic in
                    [".push-type.liveactivity", ".push-type.widgets"].first(where: topic.hasSuffix).map { String(topic.dropLast($0.count)) } ?? topic
                }
            case .broadcastAPI(let route): route.bundleId
            }
        if let keyID = connection.keyID, let bundleID, let rejection = verifier.scopeRejection(keyID: keyID, bundleID: bundleID, environment: environment) {
            let id: (name: String, value: String?) = if case .device = target { ("apns-id", fields["apns-id"]) } else { ("apns-request-id", fields["apns-request-id"]) }
            return reject(rejection, id: id, context: context)
        }
        switch target {
        case .device(let token): answer(request, token: token, fields: fields, now: now, context: context)
        case .broadcastAPI(let route): answer(request, route: route, fields: fields, now: now, context: context)
        }
    }

    /// The answer to a request whose provider token is fine: validation, then a fault if one is armed.
    private func answer(_ request: NotificationValidator.Request, token: String, fields: [String: String], now: Date, context: ChannelHandlerContext) {
        let streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) } ?? 0
        let notification: AcceptedNotification
        switch NotificationValidator.validate(request, token: token, now: now, connection: connection.id, stream: streamID) {
        case .failure(let rejection): return reject(rejection, id: ("apns-id", fields["apns-id"]), context: context)
        case .success(let value): notification = value
        }

        guard let fault = state.takeFault(for: token) else {
            state.record(notification)
            if let channel = notification.inputPushChannel {
                // The new activity subscribes to the channel (when its app has it).
                state.subscribe(1, to: channel, bundleId: String(notification.topic.dropLast(".push-type.liveactivity".count)))
            }
            return accept(notification, context: context)
        }
        inject(
            fault, id: ("apns-id", notification.apnsID), now: now, context: context, record: { self.state.record(notification) },
            accept: { handler, context in handler.accept(notification, context: context) })
    }

    /// Injects an armed fault into a request that passed validation: `record` notes it as
    /// accepted (for the faults that let it through), `accept` answers it.
    private func inject(
        _ fault: Fault, id: (name: String, value: String?), now: Date, context: ChannelHandlerContext, record: () -> Void,
        accept: @escaping @Sendable (APNsStreamHandler, ChannelHandlerContext) -> Void
    ) {
        let streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)).map { Int($0) } ?? 0
        switch fault.kind {
        case .reject:
            let timestamp =
                fault.status == 410 ? Date(timeIntervalSince1970: Double(fault.timestampMilliseconds ?? Int64(now.timeIntervalSince1970 * 1_000)) / 1_000) : nil
            reject(APNsRejection(fault.status ?? 500, fault.reason ?? "InternalServerError", timestamp: timestamp), id: id, context: context)
        case .delay:
            record()
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(Int64(fault.delayMilliseconds ?? 1_000))) {
                let (handler, context) = loopBound.value
                accept(handler, context)
            }
        case .stall:
            record()
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

    /// The answer to a broadcast API request whose provider token is fine: channel management
    /// (never faulted), or a broadcast (validated against its channel, then a fault if one is armed).
    private func answer(
        _ request: NotificationValidator.Request, route: BroadcastValidator.Route, fields: [String: String], now: Date, context: ChannelHandlerContext
    ) {
        let requestID = fields["apns-request-id"] ?? UUID().uuidString.lowercased()
        let id = (name: "apns-request-id", value: Optional(requestID))
        let bundle = route.bundleId
        /// The app's channel named by `apns-channel-id`, or APNs's refusal.
        func namedChannel() -> Result<SimulatedChannel, APNsRejection> {
            BroadcastValidator.channelId(fields).flatMap { channelID in
                state.channel(channelID, bundleId: bundle).map { .success($0) } ?? .failure(APNsRejection(400, "ChannelNotRegistered"))
            }
        }
        switch route {
        case .create:
            switch BroadcastValidator.creation(request.body).flatMap({ state.createChannel(bundleId: bundle, storagePolicy: $0, now: now) }) {
            case .failure(let rejection): reject(rejection, id: id, context: context)
            case .success(let channel): respond(201, [("apns-request-id", requestID), ("apns-channel-id", channel.id)], context: context)
            }
        case .read:
            switch namedChannel() {
            case .failure(let rejection): reject(rejection, id: id, context: context)
            case .success(let channel):
                let body = #"{"message-storage-policy":\#(channel.storagePolicy),"push-type":"LiveActivity"}"#
                respond(200, [("apns-request-id", requestID), ("apns-channel-id", channel.id)], body: Array(body.utf8), context: context)
            }
        case .delete:
            switch namedChannel() {
            case .failure(let rejection): reject(rejection, id: id, context: context)
            case .success(let channel):
                _ = state.deleteChannel(channel.id, bundleId: bundle)
                respond(204, [("apns-request-id", requestID)], context: context)
            }
        case .list:
            let ids = state.channels(bundleId: bundle).map(\.id)
            let body = (try? IsletJSON.encode(["channels": ids])) ?? Array(#"{"channels":[]}"#.utf8)
            respond(200, [("apns-request-id", requestID)], body: body, context: context)
        case .broadcast:
            let broadcast: AcceptedBroadcast
            switch namedChannel().flatMap({ BroadcastValidator.validate(request, channel: $0, requestId: requestID, now: now, connection: connection.id) }) {
            case .failure(let rejection): return reject(rejection, id: id, context: context)
            case .success(let value): broadcast = value
            }
            let accepted: [(String, String)] = [("apns-request-id", requestID), ("apns-unique-id", broadcast.uniqueID)]
            guard let fault = state.takeFault(for: nil, channel: broadcast.channelId) else {
                state.record(broadcast)
                return respond(200, accepted, context: context)
            }
            inject(
                fault, id: id, now: now, context: context, record: { self.state.record(broadcast) },
                accept: { handler, context in handler.respond(200, accepted, context: context) })
        }
    }

    /// A success answer: HEADERS (ending the stream unless a body follows), then the body.
    private func respond(_ status: Int, _ fields: [(String, String)], body: [UInt8] = [], context: ChannelHandlerContext) {
        var headers = HPACKHeaders([(":status", String(status))] + fields)
        if !body.isEmpty { headers.add(name: "content-type", value: "application/json") }
        context.write(wrapOutboundOut(.headers(.init(headers: headers, endStream: body.isEmpty))), promise: nil)
        if !body.isEmpty {
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(context.channel.allocator.buffer(bytes: body)), endStream: true))), promise: nil)
        }
        context.flush()
    }

    private func accept(_ notification: AcceptedNotification, context: ChannelHandlerContext) {
        let headers: HPACKHeaders = [":status": "200", "apns-id": notification.apnsID, "apns-unique-id": notification.uniqueID]
        context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
    }

    /// Answers with APNs's error: the status, the request's id header as sent, `{"reason": …}`.
    private func reject(_ rejection: APNsRejection, id: (name: String, value: String?), context: ChannelHandlerContext) {
        state.rejected(rejection)
        var headers: HPACKHeaders = [":status": String(rejection.status), "content-type": "application/json"]
        if let value = id.value { headers.add(name: id.name, value: value) }
        context.write(wrapOutboundOut(.headers(.init(headers: headers))), promise: nil)
        let body = context.channel.allocator.buffer(bytes: rejection.body)
        context.writeAndFlush(wrapOutboundOut(.data(.init(data: .byteBuffer(body), endStream: true))), promise: nil)
    }
}
