import APNsSimulator
import Foundation
import IsletTesting
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization
import Testing
@testable import APNsDispatcher
import IsletMessages

/// Connections that hang before the request is written: the attempt's deadline covers them, and
/// the failure says APNs cannot have processed the push.
@Suite("APNs connections that hang before the request is written", .timeLimit(.minutes(1)))
struct StalledConnectionTests {
    @Test("a server that never answers the TLS handshake: the send fails at its deadline as not processed; the connect gives up at its own timeout")
    func handshakeNeverCompletes() async throws {
        try await withServer(.silent) { port, trust, server in
            let client = try makeClient(port: port, trust: trust, timeout: .seconds(1), connectTimeout: .seconds(30))
            // `.stalled` is raised only by the attempt's deadline (the connect's own timeout is 30 s,
            // the suite's limit one minute): the kind says when it failed, no stopwatch needed.
            let error = await #expect(throws: APNsTransportError.self) {
                try await client.send(push(hexToken(1)), teamID: signingKey.teamID, environment: .production)
            }
            #expect(error?.kind == .stalled)
            #expect(error?.isAmbiguous == false)
            #expect(server.accepted == 1)

            // `.connect` "no TLS handshake … within 500 ms" is raised only by the connect's deadline.
            let connectError = await #expect(throws: APNsTransportError.self) {
                try await APNsConnection.connect(
                    id: 1, host: "127.0.0.1", port: port, sslContext: client.sslContext, serverHostname: nil, connectTimeout: .milliseconds(500),
                    group: .singletonMultiThreadedEventLoopGroup)
            }
            #expect(connectError?.kind == .connect)
            #expect(connectError?.description.contains("no TLS handshake and HTTP/2 SETTINGS within") == true, "\(connectError.map { "\($0)" } ?? "")")
            client.shutdown()
        }
    }

    @Test("a connection that never becomes active (no route, or the TCP connect times out) fails its connect as .connect, without leaking its readiness promise")
    func neverActive() async throws {
        try await withServer(.zeroWindow) { port, trust, _ in
            let client = try makeClient(port: port, trust: trust, timeout: .seconds(1))
            // An address nothing answers (the connect times out, or there is no route), and a closed port.
            for (host, port) in [("10.255.255.1", 443), ("127.0.0.1", 1)] {
                let error = await #expect(throws: APNsTransportError.self) {
                    try await APNsConnection.connect(
                        id: 1, host: host, port: port, sslContext: client.sslContext, serverHostname: nil, connectTimeout: .milliseconds(200),
                        group: .singletonMultiThreadedEventLoopGroup)
                }
                #expect(error?.kind == .connect, "\(host)")
            }
            client.shutdown()
        }
    }

    @Test("a server that grants no flow-control window: the send fails at its deadline as not processed; the next push goes over a new connection")
    func zeroWindow() async throws {
        try await withServer(.zeroWindow) { port, trust, server in
            // The deadline also covers TCP, TLS and the HTTP/2 SETTINGS: long enough that a loaded
            // machine still sends the HEADERS before it passes.
            let client = try makeClient(port: port, trust: trust, timeout: .seconds(5))
            for attempt in 1...2 {
                // `.stalled`: failed by the attempt's deadline, with the body still unwritten.
                let error = await #expect(throws: APNsTransportError.self) {
                    try await client.send(push(hexToken(attempt)), teamID: signingKey.teamID, environment: .production)
                }
                #expect(error?.kind == .stalled)
                #expect(error?.isAmbiguous == false)
                #expect(server.streams == attempt, "the request's HEADERS went out; its body had no window")
                #expect(server.accepted == attempt, "a stalled connection is not used again")
            }
            // The stalled connections are closed by the client (they had no other push); the
            // suite's time limit fails the test if one stays open.
            await server.allClosed()
            #expect(server.open == 0)
            client.shutdown()
        }
    }
}

/// A test server that misbehaves: it accepts TCP connections and then either never answers the TLS
/// handshake, or completes TLS and HTTP/2 but advertises SETTINGS_INITIAL_WINDOW_SIZE = 0 and never
/// sends WINDOW_UPDATE (and never answers).
private final class MisbehavingServer: Sendable {
    enum Kind { case silent, zeroWindow }

    private struct State {
        var children: [any Channel] = []
        var streams = 0
    }

    private let state = Mutex(State())
    var accepted: Int { state.withLock { $0.children.count } }
    var open: Int { state.withLock { $0.children.filter(\.isActive).count } }
    var streams: Int { state.withLock { $0.streams } }

    func accept(_ channel: any Channel) { state.withLock { $0.children.append(channel) } }
    func openedStream() { state.withLock { $0.streams += 1 } }
    /// Returns once every connection accepted so far is closed.
    func allClosed() async {
        let children = state.withLock { $0.children }
        let closed = AwaitedLog<Void>()
        for child in children { child.closeFuture.whenComplete { _ in closed.append(()) } }
        await closed.wait(for: children.count)
    }

    func closeAll() { for child in state.withLock({ $0.children }) { child.close(promise: nil) } }
}

private func withServer(
    _ kind: MisbehavingServer.Kind, _ body: @Sendable (Int, String, MisbehavingServer) async throws -> Void
) async throws {
    let tls = try SimulatorTLS.selfSigned()
    let sslContext = try NIOSSLContext(configuration: tls.serverConfiguration())
    let server = MisbehavingServer()
    let listener = try await ServerBootstrap(group: .singletonMultiThreadedEventLoopGroup)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelInitializer { channel in
            server.accept(channel)
            return channel.eventLoop.makeCompletedFuture {
                guard kind == .zeroWindow else { return }
                try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                var http2 = NIOHTTP2Handler.ConnectionConfiguration()
                http2.initialSettings = [
                    HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
                    HTTP2Setting(parameter: .initialWindowSize, value: 0),
                ]
                _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                    mode: .server, connectionConfiguration: http2, streamConfiguration: .init()
                ) { stream in
                    server.openedStream()
                    return stream.eventLoop.makeSucceededVoidFuture()
                }
            }
        }
        .bind(host: "127.0.0.1", port: 0).get()
    do {
        try await body(try #require(listener.localAddress?.port), tls.certificatePEM, server)
    } catch {
        server.closeAll()
        try await listener.close()
        throw error
    }
    server.closeAll()
    try await listener.close()
}
