import Foundation
import IsletMessages
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// HTTP/2 to APNs: a few long-lived connections per team and environment ("lanes"), each carrying
/// many pushes at once, a provider token per team shared by its connections, explicit deadlines.
///
/// Connections are opened on first use and reopened when they close or receive GOAWAY; pushes
/// are spread over a lane's connections in turn. One developer account per connection, as APNs
/// requires: a lane is one team in one environment.
public final class APNsClient: Sendable {
    public struct Endpoint: Sendable, Equatable {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public static let production = Endpoint(host: "api.push.apple.com", port: 443)
        public static let sandbox = Endpoint(host: "api.sandbox.push.apple.com", port: 443)
        /// Broadcasts (iOS 18). Apple's page names `api.push.apple.com` but its example, APNSwift
        /// and Sockudo use these hosts.
        public static let broadcastProduction = Endpoint(host: "api-broadcast.push.apple.com", port: 443)
        public static let broadcastSandbox = Endpoint(host: "api-broadcast.sandbox.push.apple.com", port: 443)
        /// Channel management (iOS 18).
        public static let channelsProduction = Endpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
        public static let channelsSandbox = Endpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
    }

    /// The three APNs services a team talks to, each on hosts of its own.
    public enum Service: Sendable, Hashable, CaseIterable {
        /// Pushes to device tokens.
        case push
        /// Broadcasts to channels.
        case broadcast
        /// Channel management.
        case channels
    }

    public struct Configuration: Sendable {
        public var production: Endpoint
        public var sandbox: Endpoint
        public var broadcastProduction: Endpoint = .broadcastProduction
        public var broadcastSandbox: Endpoint = .broadcastSandbox
        public var channelsProduction: Endpoint = .channelsProduction
        public var channelsSandbox: Endpoint = .channelsSandbox
        /// Connections per team and environment.
        public var connectionsPerLane: Int
        /// How long one attempt of a push may take in all — waiting for a connection, a stream,
        /// flow-control window and the answer — before it fails: as
        /// ``APNsTransportError/Kind/stalled`` if the request was not completely written by then,
        /// as ``APNsTransportError/Kind/timeout`` (its stream cancelled) if it was.
        public var requestTimeout: Duration
        /// How long opening a connection may take: TCP, the TLS handshake and the server's HTTP/2
        /// SETTINGS.
        public var connectTimeout: Duration
        /// PEM certificates to trust instead of the system's (the simulator's); `nil`: the system's.
        public var trustedCertificatesPEM: String?

        public init(
            production: Endpoint = .production, sandbox: Endpoint = .sandbox, connectionsPerLane: Int = 2,
            requestTimeout: Duration = .seconds(10), connectTimeout: Duration = .seconds(5), trustedCertificatesPEM: String? = nil
        ) {
            self.production = production
            self.sandbox = sandbox
            self.connectionsPerLane = max(1, connectionsPerLane)
            self.requestTimeout = requestTimeout
            self.connectTimeout = connectTimeout
            self.trustedCertificatesPEM = trustedCertificatesPEM
        }

        /// Every service of both environments at one endpoint (the simulator).
        public mutating func useEverywhere(_ endpoint: Endpoint) {
            (production, sandbox, broadcastProduction, broadcastSandbox, channelsProduction, channelsSandbox) =
                (endpoint, endpoint, endpoint, endpoint, endpoint, endpoint)
        }

        func endpoint(_ service: Service, _ environment: APNsEnvironment) -> Endpoint {
            let sandbox = environment == .sandbox
            return switch service {
            case .push: sandbox ? self.sandbox : production
            case .broadcast: sandbox ? broadcastSandbox : broadcastProduction
            case .channels: sandbox ? channelsSandbox : channelsProduction
            }
        }
    }

    /// One signing key's connections to one service in one environment: a connection never
    /// mixes keys (APNs binds a connection to the key of its first provider token).
    private struct LaneKey: Hashable {
        var keyID: String
        var environment: APNsEnvironment
        var service: Service
    }

    private let configuration: Configuration
    let sslContext: NIOSSLContext
    private let keys: [APNsSigningKey]
    /// By key id.
    private let tokenSources: [String: ProviderTokenSource]
    private let lanes: [LaneKey: Lane]
    private let clock: any WallClock
    private let logger: Logger

    /// - Parameter keys: per team, a key for every app and both environments, or keys limited to
    ///   one environment and/or a list of apps (``APNsSigningKey/Scope``): each push goes with the
    ///   most limited key that covers its app and environment.
    public init(
        configuration: Configuration, keys: [APNsSigningKey], group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger, clock: any WallClock = SystemWallClock()
    ) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        tls.minimumTLSVersion = .tlsv12
        if let pem = configuration.trustedCertificatesPEM {
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))
        }
        let sslContext = try NIOSSLContext(configuration: tls)
        self.configuration = configuration
        self.sslContext = sslContext
        self.clock = clock
        self.logger = logger
        self.keys = keys
        self.tokenSources = Dictionary(keys.map { ($0.keyID, ProviderTokenSource(key: $0)) }, uniquingKeysWith: { first, _ in first })
        var lanes: [LaneKey: Lane] = [:]
        // Connections open on first use: a team that never broadcasts opens none for it.
        for key in keys {
            for environment in [APNsEnvironment.production, .sandbox] where key.scope.environment == nil || key.scope.environment == environment {
                for service in Service.allCases {
                    let name = "\(key.teamID)/\(key.keyID)/\(environment)"
                    lanes[LaneKey(keyID: key.keyID, environment: environment, service: service)] = Lane(
                        name: service == .push ? name : "\(name)/\(service)",
                        endpoint: configuration.endpoint(service, environment), count: service == .channels ? 1 : configuration.connectionsPerLane,
                        sslContext: sslContext, connectTimeout: configuration.connectTimeout, group: group, logger: logger)
                }
            }
        }
        self.lanes = lanes
    }

    /// Whether the client can send for this team (it has a key of the team), or has this key.
    public func knowsTeam(_ teamID: String) -> Bool { !keys(of: teamID).isEmpty }

    /// Sends one push for `teamID` to `environment`; returns APNs's answer, or throws
    /// ``APNsTransportError`` when there was none. The attempt, from here to the answer, takes at
    /// most ``Configuration/requestTimeout``.
    public func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer {
        let service: Service = if case .channel = push.destination { .broadcast } else { .push }
        let (connection, token, deadline) = try await connection(service, teamID: teamID, bundleID: push.bundleID, environment: environment)
        return try await connection.send(push, authorization: token, deadline: deadline)
    }

    /// Sends one channel management request for `teamID` in `environment`; returns the reply
    /// whatever its status, or throws ``APNsTransportError`` when there was none.
    func exchange(_ request: APNsChannelRequest, teamID: String, environment: APNsEnvironment) async throws -> APNsReply {
        let (connection, token, deadline) = try await connection(.channels, teamID: teamID, bundleID: request.bundleID, environment: environment)
        return try await connection.manage(request, authorization: token, deadline: deadline)
    }

    /// A connection of the lane of the key that signs for the app in `environment`, for
    /// `service`; the provider token to use on it, and the attempt's deadline.
    private func connection(
        _ service: Service, teamID: String, bundleID: String, environment: APNsEnvironment
    ) async throws -> (APNsConnection, String, NIODeadline) {
        let deadline = NIODeadline.now() + TimeAmount(configuration.requestTimeout)
        guard let key = signingKey(teamID, bundleID: bundleID, environment: environment),
            let lane = lanes[LaneKey(keyID: key.keyID, environment: environment, service: service)], let source = tokenSources[key.keyID]
        else {
            throw APNsTransportError(.connect, "no signing key of team \(teamID) covers \(bundleID) in \(environment.rawValue)")
        }
        let connection = try await lane.connection(deadline: deadline)
        let now = clock.date
        let candidate = try await source.current(now: now)
        return (connection, connection.providerToken.withLock { $0.use(candidate: candidate, now: now) }, deadline)
    }

    /// The key for a push: `signer` names it (the dispatcher's lanes are keys when keys are scoped),
    /// or is a team, whose most limited key that covers the app and environment signs.
    private func signingKey(_ signer: String, bundleID: String, environment: APNsEnvironment) -> APNsSigningKey? {
        if let key = keys.first(where: { $0.keyID == signer }) { return key.scope.covers(bundleID: bundleID, environment: environment) ? key : nil }
        return APNsSigningKey.choose(from: keys, teamID: signer, bundleID: bundleID, environment: environment)
    }

    /// The keys a lane name stands for: the key it names, or every key of the team it names.
    private func keys(of signer: String) -> [APNsSigningKey] {
        if let key = keys.first(where: { $0.keyID == signer }) { return [key] }
        return keys.filter { $0.teamID == signer }
    }

    /// Every lane of a key, or of a team's keys.
    private func lanes(of signer: String) -> [Lane] {
        let ids = Set(keys(of: signer).map(\.keyID))
        return lanes.filter { ids.contains($0.key.keyID) }.map(\.value)
    }

    /// APNs said the provider token expired: mint new ones (the key's, or each key of the team)
    /// and reconnect their lanes (APNs may refuse a new token on a connection that used another).
    public func renewProviderToken(teamID: String) {
        let sources = keys(of: teamID).compactMap { tokenSources[$0.keyID] }
        guard !sources.isEmpty else { return }
        for source in sources { source.renew(now: clock.date) }
        for lane in lanes(of: teamID) { lane.reconnect() }
        logger.warning("provider token renewed after ExpiredProviderToken", metadata: ["apns.team": "\(teamID)"])
    }

    /// Closes every connection of a team (they reopen on the next push).
    public func reconnect(teamID: String) {
        for lane in lanes(of: teamID) { lane.reconnect() }
    }

    public func shutdown() {
        for lane in lanes.values { lane.reconnect() }
    }
}

/// The connections of one team in one environment.
final class Lane: Sendable {
    private struct Slot {
        var connection: APNsConnection?
        /// The connection being opened, and its id.
        var connecting: (id: Int, future: EventLoopFuture<APNsConnection>)?
    }

    private enum Pick {
        case ready(APNsConnection)
        case wait(EventLoopFuture<APNsConnection>)
        /// A connection this push started to open, in slot `slot`.
        case opening(id: Int, slot: Int, EventLoopFuture<APNsConnection>)
    }

    let name: String
    private let endpoint: APNsClient.Endpoint
    private let slots: Mutex<[Slot]>
    private let next = Atomic<Int>(0)
    private let connectionIDs = Atomic<Int>(0)
    private let sslContext: NIOSSLContext
    private let connectTimeout: Duration
    private let group: any EventLoopGroup
    private let logger: Logger

    init(
        name: String, endpoint: APNsClient.Endpoint, count: Int, sslContext: NIOSSLContext, connectTimeout: Duration, group: any EventLoopGroup,
        logger: Logger
    ) {
        self.name = name
        self.endpoint = endpoint
        self.slots = Mutex(Array(repeating: Slot(), count: count))
        self.sslContext = sslContext
        self.connectTimeout = connectTimeout
        self.group = group
        self.logger = logger
    }

    /// A usable connection, in turn; opens one when its slot has none. Waits for one being opened
    /// until `deadline` at most (the opening goes on, bounded by the connect timeout, for the next
    /// pushes); past it, fails with ``APNsTransportError/Kind/stalled``.
    func connection(deadline: NIODeadline) async throws -> APNsConnection {
        let (index, name) = (next.wrappingAdd(1, ordering: .relaxed).oldValue, self.name)
        let pick = slots.withLock { slots -> Pick in
            let i = index % slots.count
            if let connection = slots[i].connection, connection.isUsable { return .ready(connection) }
            if let connecting = slots[i].connecting { return .wait(connecting.future) }
            // Closed, GOAWAY or stalled: the pushes still waiting for an answer on it get one.
            slots[i].connection?.retire()
            slots[i].connection = nil
            let (endpoint, sslContext, connectTimeout, group) = (self.endpoint, self.sslContext, self.connectTimeout, self.group)
            let id = connectionIDs.wrappingAdd(1, ordering: .relaxed).newValue
            let serverHostname = endpoint.host.first?.isNumber == true ? nil : endpoint.host
            let future = group.any().makeFutureWithTask {
                try await APNsConnection.connect(
                    id: id, host: endpoint.host, port: endpoint.port, sslContext: sslContext, serverHostname: serverHostname,
                    connectTimeout: connectTimeout, group: group)
            }
            slots[i].connecting = (id, future)
            return .opening(id: id, slot: i, future)
        }
        let future: EventLoopFuture<APNsConnection>
        switch pick {
        case .ready(let connection):
            return connection
        case .wait(let connecting):
            future = connecting
        case .opening(let id, let i, let opening):
            // The slot takes the connection even when every push that waited for it gave up.
            opening.whenComplete { [self] result in
                slots.withLock { slots in
                    guard slots[i].connecting?.id == id else { return }
                    slots[i].connecting = nil
                    if case .success(let connection) = result { slots[i].connection = connection }
                }
                if case .success(let connection) = result {
                    logger.debug("APNs connection opened", metadata: ["apns.lane": "\(name)", "apns.connection": "\(connection.id)"])
                }
            }
            future = opening
        }
        // Each push waits on a promise of its own, failed at its own deadline.
        let waiter = future.eventLoop.makePromise(of: APNsConnection.self)
        future.cascade(to: waiter)
        waiter.fail(APNsTransportError(.stalled, "no connection to \(name) by the deadline"), at: deadline)
        return try await waiter.futureResult.get()
    }

    /// Closes every connection; the next pushes open new ones.
    func reconnect() {
        let closing = slots.withLock { slots -> [APNsConnection] in
            defer {
                for i in slots.indices { slots[i].connection = nil }
            }
            return slots.compactMap(\.connection)
        }
        for connection in closing { connection.close() }
    }
}
