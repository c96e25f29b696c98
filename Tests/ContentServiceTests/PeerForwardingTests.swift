import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import IsletKafka
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Logging
import NIOCore
import Synchronization
import Testing
@testable import ContentService

@Suite("A question about an activity another instance owns goes to that instance", .timeLimit(.minutes(1)))
struct PeerForwardingTests {
    static let key = String(repeating: "k", count: 40)
    static let uri = "/v1/activities/order-42?bundleId=com.example.food"

    /// The peers as the test plays them: what each answers, and every call made to them.
    final class Peers: Sendable {
        struct Call: Sendable {
            var url: String
            var method: HTTPRequest.Method
            var pathAndQuery: String
            var headers: HTTPFields
            var body: [UInt8]?
        }
        /// Base URL → the status it answers (and a body naming it).
        let answers = Mutex<[String: Int]>([:])
        let calls = Mutex<[Call]>([])
        /// While true, every call waits (a peer that is slow to answer).
        let held = Mutex(false)

        func send(_ url: String, _ method: HTTPRequest.Method, _ pathAndQuery: String, _ headers: HTTPFields, _ body: [UInt8]?) async throws -> Response {
            calls.withLock { $0.append(Call(url: url, method: method, pathAndQuery: pathAndQuery, headers: headers, body: body)) }
            while held.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            guard let status = answers.withLock({ $0[url] }) else { throw CancellationError() }
            var headers: HTTPFields = [.contentType: "application/json"]
            if status == 503 { headers[.retryAfter] = "7" }
            return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(string: "{\"from\":\"\(url)\"}")))
        }

        func asked() -> [String] { calls.withLock { $0.map(\.url) } }
        func forget() { calls.withLock { $0 = [] } }
    }

    let published = RecordingEvents()
    let peers = Peers()
    let engine: ContentEngine

    init() throws {
        engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
    }

    /// The HTTP API of an instance that owns partition 5 (the activity is in 3), with two peers at
    /// 10.0.0.1:8083 and 10.0.0.2:8083, and itself listed too (127.0.0.1:8083: left out).
    /// `ready: false`: still reading its memory (a restart); `withPeers: false`: no ISLET_CONTENT_PEERS.
    func withAPI(ready: Bool = true, withPeers: Bool = true, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let (published, peers) = (self.published, self.peers)
        let intake = EventIntake(engine: engine, isReady: { ready }) { try published.publish($0) }
        let keys = try BackendKeys(["backend": Self.key + ":read+write"])
        let lookup = ActivityLookup(partition: { _ in 3 }, owned: { [5] }, readOutcomes: { _ in [:] }, readRequest: { _, _ in nil })
        let forwarding = PeerForwarding(
            peers: [.init(host: "content-a", port: 8083), .init(host: "content-b", port: 8083), .init(host: "localhost", port: 8083)],
            ownPort: 8083, metrics: ContentMetrics(), logger: ActivityHTTPAPITests.logger,
            resolve: { peer in
                switch peer.host {
                case "content-a": ["10.0.0.1"]
                case "content-b": ["10.0.0.2"]
                default: ["127.0.0.1"]
                }
            },
            send: { url, method, path, headers, body in try await peers.send(url, method, path, headers, body) })
        let router = Router()
        router.add(middleware: HTTPErrorMiddleware(logger: ActivityHTTPAPITests.logger))
        ActivityHTTPAPI(intake: intake, keys: keys, lookup: lookup, peers: withPeers ? forwarding : nil).addRoutes(to: router)
        try await Application(router: router, logger: ActivityHTTPAPITests.logger).test(.router) { client in try await body(client) }
    }

    static let a = "http://10.0.0.1:8083"
    static let b = "http://10.0.0.2:8083"

    static func headers(_ extra: HTTPFields = [:]) -> HTTPFields {
        var headers: HTTPFields = [.authorization: "Bearer \(key)"]
        headers.append(contentsOf: extra)
        return headers
    }

    static func from(_ response: TestResponse) -> String? {
        (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: String])?["from"]
    }

    @Test("the owner is found by asking every peer (itself left out), its answer is the answer, and it is asked first next time")
    func findsTheOwner() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        try await withAPI { [peers] client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .ok && Self.from(response) == Self.b)
            }
            #expect(Set(peers.asked()) == [Self.a, Self.b], "every peer but itself")
            let call = try #require(peers.calls.withLock { $0.first { $0.url == Self.b } })
            #expect(call.pathAndQuery == Self.uri && call.method == .get)
            #expect(call.headers[.authorization] == "Bearer \(Self.key)", "the caller's own credentials: the owner checks them")
            #expect(call.headers[PeerForwarding.forwardedHeader] == "8083")

            peers.forget()
            try await client.execute(uri: Self.uri + "&again", method: .get, headers: Self.headers()) { response in
                #expect(Self.from(response) == Self.b)
            }
            #expect(peers.asked() == [Self.b], "the owner it learned, alone")

            // The partition moved: the old owner says 421, the others are asked again.
            peers.answers.withLock { $0 = [Self.a: 200, Self.b: 421] }
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .ok && Self.from(response) == Self.a)
            }
            #expect(peers.asked() == [Self.b, Self.a])
        }
        #expect(published.events.isEmpty)
    }

    @Test("the known owner answers 503 (busy): relayed, and it stays the owner (no fan-out); a refusal every instance gives alike is relayed, not learned from")
    func busyOwnerAndRefusals() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        try await withAPI { [peers] client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(Self.from(response) == Self.b) }
            peers.answers.withLock { $0 = [Self.a: 421, Self.b: 503] }
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "7" && Self.from(response) == Self.b)
            }
            #expect(peers.asked() == [Self.b], "no fan-out onto a busy partition")
            peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(Self.from(response) == Self.b) }
            #expect(peers.asked() == [Self.b], "still the owner")

            // An answer any instance gives (here 400) is relayed but proves nothing: the next call asks everyone.
            peers.answers.withLock { $0 = [Self.a: 400, Self.b: 421] }
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .badRequest && Self.from(response) == Self.a)
            }
            // Had a's 400 been learned, a's 503 would now be relayed; b owns it.
            peers.answers.withLock { $0 = [Self.a: 503, Self.b: 200] }
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(Self.from(response) == Self.b) }
            #expect(Set(peers.asked()) == [Self.a, Self.b])
        }
    }

    @Test("the owner it learned stops answering (down, or gone with its address): a question asks the others at once, a keyed event is 503, and the next asks everyone")
    func deadOwner() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        let event = #"{"kind":"update","attributesType":"DeliveryAttributes","bundleId":"com.example.food","sequence":1,"fields":{"orderId":"42","status":"preparing"}}"#
        try await withAPI { [peers, published] client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(Self.from(response) == Self.b) }
            peers.answers.withLock { $0 = [Self.a: 200] }  // b is gone; a owns the partition now
            peers.forget()
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .ok && Self.from(response) == Self.a)
            }
            #expect(peers.asked() == [Self.b, Self.a])
            // Learned a; a goes silent too: the keyed event may have been published there.
            peers.answers.withLock { $0 = [:] }
            let keyed = Self.headers([.contentType: "application/json", ActivityHTTPAPI.idempotencyKeyHeader: "k-1"])
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .serviceUnavailable)
            }
            peers.answers.withLock { $0 = [Self.b: 202] }
            peers.forget()
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .accepted && Self.from(response) == Self.b)
            }
            #expect(Set(peers.asked()) == [Self.a, Self.b], "the retry asks everyone")
            #expect(published.events.isEmpty)
        }
    }

    @Test("forwarded to an instance that does not own the partition: 421 even while it is starting, and even without peers of its own (a keyed event is never published there)")
    func forwardedToANonOwner() async throws {
        let event = #"{"kind":"update","attributesType":"DeliveryAttributes","bundleId":"com.example.food","sequence":1,"fields":{"orderId":"42","status":"preparing"}}"#
        let forwarded = Self.headers([PeerForwarding.forwardedHeader: "1"])
        try await withAPI(ready: false) { client in
            try await client.execute(uri: Self.uri, method: .get, headers: forwarded) { response in #expect(response.status == .misdirectedRequest) }
        }
        try await withAPI(withPeers: false) { client in
            var headers = forwarded
            headers[.contentType] = "application/json"
            headers[ActivityHTTPAPI.idempotencyKeyHeader] = "k-2"
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: headers, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .misdirectedRequest)
            }
        }
        #expect(published.events.isEmpty && peers.asked().isEmpty)
    }

    @Test("a restarting instance still reading its memory asks the owner")
    func startingInstanceAsks() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        try await withAPI(ready: false) { client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .ok && Self.from(response) == Self.b)
            }
        }
    }

    @Test("a path with empty segments (the router ignores them) is forwarded as its route: /v1//activities/… goes as /v1/activities/…")
    func emptySegments() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        try await withAPI { [peers] client in
            try await client.execute(uri: "/v1//activities/order-42?bundleId=com.example.food", method: .get, headers: Self.headers()) { response in
                #expect(response.status == .ok && Self.from(response) == Self.b)
            }
            #expect(peers.calls.withLock { $0.allSatisfy { $0.pathAndQuery == Self.uri } })
        }
    }

    @Test("no peer owns it: 503 with Retry-After; a peer's 503 (starting, rebalancing) is relayed; a peer that does not answer: 503")
    func nobodyOwnsIt() async throws {
        try await withAPI { [peers] client in
            peers.answers.withLock { $0 = [Self.a: 421, Self.b: 421] }
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "2")
                let body = try IsletJSON.decodeValue(HTTPAPIError.Body.self, from: Array(response.body.readableBytesView))
                #expect(body.error == .unavailable && body.reason.contains("partition 3"))
            }
            peers.answers.withLock { $0 = [Self.a: 503] }  // b does not answer at all
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "7" && Self.from(response) == Self.a)
            }
        }
    }

    @Test("a forwarded call is never forwarded again (421), and a call it would refuse is refused here, before any peer is asked")
    func noLoopsNoAmplification() async throws {
        peers.answers.withLock { $0 = [Self.a: 200, Self.b: 200] }
        try await withAPI { [peers] client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers([PeerForwarding.forwardedHeader: "9999"])) { response in
                #expect(response.status == .misdirectedRequest)
            }
            try await client.execute(uri: Self.uri, method: .get, headers: [:]) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(uri: "/v1/activities/order-42", method: .get, headers: Self.headers()) { response in
                #expect(response.status == .badRequest)
            }
            #expect(peers.asked().isEmpty)
        }
    }

    @Test("at most maximumForwards calls are forwarded at once: another is answered 503 at once, not queued")
    func bounded() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 200] }
        peers.held.withLock { $0 = true }
        try await withAPI { [peers] client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<PeerForwarding.maximumForwards {
                    group.addTask {
                        try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(response.status == .ok) }
                    }
                }
                // Every one of them is waiting for its peers (two calls each).
                while peers.calls.withLock({ $0.count }) < 2 * PeerForwarding.maximumForwards { try await Task.sleep(for: .milliseconds(5)) }
                try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in
                    #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "1")
                    #expect(String(buffer: response.body).contains("too many questions"))
                }
                #expect(peers.calls.withLock { $0.count } == 2 * PeerForwarding.maximumForwards, "the refused one asked nobody")
                peers.held.withLock { $0 = false }
                try await group.waitForAll()
            }
            // Every slot given back.
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers()) { response in #expect(response.status == .ok) }
        }
    }

    @Test("an event with an Idempotency-Key goes to the activity's owner, which keeps the answers; without a key, or when no owner answers, it is published here")
    func idempotentEvents() async throws {
        peers.answers.withLock { $0 = [Self.a: 421, Self.b: 202] }
        let event = #"{"kind":"update","attributesType":"DeliveryAttributes","bundleId":"com.example.food","sequence":1,"fields":{"orderId":"42","status":"preparing"}}"#
        try await withAPI { [peers, published] client in
            let keyed = Self.headers([.contentType: "application/json", ActivityHTTPAPI.idempotencyKeyHeader: "order-42-step-1"])
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .accepted && Self.from(response) == Self.b)
            }
            let call = try #require(peers.calls.withLock { $0.first { $0.url == Self.b } })
            #expect(call.method == .post && call.body == Array(event.utf8))
            #expect(call.headers[ActivityHTTPAPI.idempotencyKeyHeader] == "order-42-step-1" && call.headers[.contentType] == "application/json")
            #expect(published.events.isEmpty, "the owner publishes it")

            peers.forget()
            let plain = Self.headers([.contentType: "application/json"])
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: plain, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .accepted && Self.from(response) == nil)
            }
            #expect(peers.asked().isEmpty && published.events.count == 1, "without a key any instance publishes it")

            // The owner answers 503 (Kafka did not acknowledge: it may have published): that answer,
            // never a second publication here.
            peers.answers.withLock { $0 = [Self.a: 421, Self.b: 503] }
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .serviceUnavailable && Self.from(response) == Self.b)
            }
            // A peer that does not answer may have published it: 503, retry with the key.
            peers.answers.withLock { $0 = [Self.a: 421] }
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .serviceUnavailable && Self.from(response) == nil)
                #expect(String(buffer: response.body).contains("retry with the same Idempotency-Key"))
            }
            #expect(published.events.count == 1)
            // Every peer says it does not own the partition (partitions moving): published here,
            // with the event id the key gives.
            peers.answers.withLock { $0 = [Self.a: 421, Self.b: 421] }
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: event)) { response in
                #expect(response.status == .accepted && Self.from(response) == nil)
            }
            #expect(published.events.count == 2)

            // Forwarded to an instance that does not own it: 421, nothing published, no key kept there.
            try await client.execute(
                uri: "/v1/activities/order-42/events", method: .post,
                headers: Self.headers([.contentType: "application/json", ActivityHTTPAPI.idempotencyKeyHeader: "other", PeerForwarding.forwardedHeader: "1"]),
                body: ByteBuffer(string: event)
            ) { response in
                #expect(response.status == .misdirectedRequest)
            }
            // A malformed body is refused here, before any peer is asked.
            peers.forget()
            try await client.execute(uri: "/v1/activities/order-42/events", method: .post, headers: keyed, body: ByteBuffer(string: "{")) { response in
                #expect(response.status == .badRequest)
            }
            #expect(peers.asked().isEmpty && published.events.count == 2)
        }
    }

    @Test("a peer's addresses come from the resolver; this machine's own include loopback (how an instance leaves itself out)")
    func addresses() {
        #expect(PeerForwarding.addresses(of: .init(host: "127.0.0.1", port: 8083)) == ["127.0.0.1"])
        #expect(PeerForwarding.addresses(of: .init(host: "localhost", port: 8083)).contains { $0 == "127.0.0.1" || $0 == "::1" })
        #expect(PeerForwarding.ownAddresses().contains("127.0.0.1"))
    }

    @Test("ISLET_CONTENT_PEERS: host:port, comma-separated")
    func peerList() throws {
        #expect(try PeerForwarding.Peer.list(" content-service:8083, [::1]:9000 ,") == [.init(host: "content-service", port: 8083), .init(host: "::1", port: 9000)])
        #expect(try PeerForwarding.Peer.list("").isEmpty)
        for wrong in ["content-service", "content-service:0", ":8083", "a:b"] {
            #expect(throws: PeerForwarding.ConfigurationProblem.self) { try PeerForwarding.Peer.list(wrong) }
        }
    }
}
