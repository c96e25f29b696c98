import HTTPTypes
import IsletRuntime
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

@Suite("Public HTTP ports: a deadline per request, a cap per address (embedded channels, manual time)")
struct HTTPConnectionGuardTests {
    static let limits = HTTPConnectionLimits(requestTimeout: .seconds(15), maxConnectionsPerAddress: 2)

    /// An active connection from `address` through a guard sharing `counts`.
    static func connection(from address: String = "198.51.100.7", counts: ConnectionCounts, limits: HTTPConnectionLimits = limits) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: HTTPConnectionGuard(limits: limits, counts: counts, logger: Logger(label: "test")))
        // An embedded channel's peer is the address it "connects" to.
        try channel.connect(to: try SocketAddress(ipAddress: address, port: 40_000)).wait()
        return channel
    }

    static let head = HTTPRequestPart.head(HTTPRequest(method: .post, scheme: nil, authority: "islet", path: "/v1/taps"))

    @Test("a connection that sends nothing, or a head and then no end of its body, is closed at the deadline and not before")
    func slowRequests() throws {
        let counts = ConnectionCounts()
        let silent = try Self.connection(counts: counts)
        silent.embeddedEventLoop.advanceTime(by: .seconds(14))
        #expect(silent.isActive)
        silent.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!silent.isActive, "nothing sent in 15 s")

        let dribbling = try Self.connection(counts: counts)
        dribbling.embeddedEventLoop.advanceTime(by: .seconds(5))
        try dribbling.writeInbound(Self.head)
        try dribbling.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "{")))
        dribbling.embeddedEventLoop.advanceTime(by: .seconds(9))
        try dribbling.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "\"")))
        #expect(dribbling.isActive)
        dribbling.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!dribbling.isActive, "the body's bytes kept coming, the request never ended: closed 15 s after the connection opened")
        #expect(counts.count(of: "198.51.100.7") == 0, "closed connections are not counted")
    }

    @Test("a whole request is not rushed while the server answers; the next request on the connection gets a new deadline")
    func answeredRequests() throws {
        let counts = ConnectionCounts()
        let channel = try Self.connection(counts: counts)
        try channel.writeInbound(Self.head)
        try channel.writeInbound(HTTPRequestPart.end(nil))
        channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(channel.isActive, "the server's time is not the client's")
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .ok)))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
        channel.embeddedEventLoop.advanceTime(by: .seconds(14))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "kept alive and idle for the request timeout")
    }

    @Test("a request answered before its body is in (a 404, a 413) does not switch the deadline off: the body and the next request must still come in time")
    func answeredEarly() throws {
        let counts = ConnectionCounts()
        let channel = try Self.connection(counts: counts)
        try channel.writeInbound(Self.head)
        try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .notFound)))
        try channel.writeOutbound(HTTPResponsePart.end(nil))
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        try channel.writeInbound(HTTPRequestPart.end(nil))
        // The next request trickles: a head never completes.
        channel.embeddedEventLoop.advanceTime(by: .seconds(14))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive, "15 s after the early-answered request was in, nothing more came in full")
    }

    @Test("one address holds at most the cap; the next connection is closed at once, others are not affected, a closed one frees its place")
    func perAddressCap() throws {
        let counts = ConnectionCounts()
        let first = try Self.connection(counts: counts)
        let second = try Self.connection(counts: counts)
        let third = try Self.connection(counts: counts)
        #expect(first.isActive && second.isActive)
        #expect(!third.isActive, "over the cap of 2")
        #expect(counts.count(of: "198.51.100.7") == 2)
        let other = try Self.connection(from: "203.0.113.9", counts: counts)
        #expect(other.isActive)
        _ = try first.close().wait()
        #expect(counts.count(of: "198.51.100.7") == 1)
        let again = try Self.connection(counts: counts)
        #expect(again.isActive)
        // IPv6: one /64 is one client.
        let v6a = try Self.connection(from: "2001:db8:1:2::a", counts: counts)
        let v6b = try Self.connection(from: "2001:db8:1:2:ffff::b", counts: counts)
        let v6c = try Self.connection(from: "2001:db8:1:2::c", counts: counts)
        let v6other = try Self.connection(from: "2001:db8:1:3::a", counts: counts)
        #expect(v6a.isActive && v6b.isActive && !v6c.isActive, "three addresses of one /64 past the cap of 2")
        #expect(v6other.isActive, "another /64 is another client")
        #expect(ConnectionCounts.client(of: "2001:db8:1:2::a") == "2001:db8:1:2::/64")
        #expect(ConnectionCounts.client(of: "::1") == "::1" && ConnectionCounts.client(of: "192.0.2.1") == "192.0.2.1")
        // No cap, no deadline: nothing is closed.
        let open = HTTPConnectionLimits(requestTimeout: .zero, maxConnectionsPerAddress: 0)
        let many = try (0..<5).map { _ in try Self.connection(counts: counts, limits: open) }
        for channel in many {
            channel.embeddedEventLoop.advanceTime(by: .seconds(3_600))
            #expect(channel.isActive)
        }
    }
}
