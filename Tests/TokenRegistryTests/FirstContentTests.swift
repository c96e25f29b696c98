import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import IsletMessages
import IsletRuntime
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import TokenRegistry

/// An app that starts its Live Activity only with real data asks token-registry for the content of
/// an activity its backend announced, proving with the activity's ticket that it is its user's;
/// token-registry reads it from content-service over HTTP (here a real HTTP server standing in
/// for content-service's route, answering as it does).
@Suite("An app reads an announced activity's content with its ticket", .timeLimit(.minutes(1)))
struct FirstContentTests {
    static let contentKey = String(repeating: "k", count: 40)
    static let ticketKid = "orders"
    static let ticketSecret = Array("a-ticket-secret-that-is-at-least-32-bytes".utf8)
    static let content = #"{"activityId":"order-42","bundleId":"com.example.food","contentState":{"status":"preparing","eta":"12:41"},"sequence":3}"#

    let publisher = RecordingPublisher()

    /// What content-service was asked, and with which key.
    final class Asked: Sendable {
        let calls = Mutex<[(path: String, authorization: String?)]>([])
    }

    static func ticket(user: String, activity: String = "order-42", bundleId: String = "com.example.food", secret: [UInt8] = ticketSecret) async throws -> String {
        try await ActivityTickets.sign(
            .init(user: user, activityId: activity, bundleId: bundleId, expires: Date().addingTimeInterval(3_600)), kid: ticketKid, secret: secret)
    }

    /// content-service's route, as it answers: 200 for order-42, 404 nothing announced, 410 ended, 503 busy; 401 without the key.
    static func contentService(_ asked: Asked) -> Router<BasicRequestContext> {
        let router = Router()
        router.get("v1/activities/:activityId/content") { request, context -> Response in
            asked.calls.withLock { $0.append((request.uri.description, request.headers[.authorization])) }
            guard request.headers[.authorization] == "Bearer \(contentKey)" else { return Response(status: .unauthorized) }
            let (status, body): (HTTPResponse.Status, String) =
                switch context.parameters.get("activityId") {
                case "order-42": (.ok, content)
                case "order-45": (.gone, #"{"error":"ended","field":"activityId","reason":"has ended"}"#)
                case "order-46": (.serviceUnavailable, #"{"error":"unavailable","reason":"busy"}"#)
                case "order-47": (.conflict, #"{"error":"conflict","field":"activityId","reason":"started on the phone by push-to-start"}"#)
                case "order-48": (.notFound, #"{"error":"notFound","reason":"no such route"}"#)
                default: (.notFound, #"{"error":"notFound","field":"activityId","reason":"no content of activity yet"}"#)
                }
            return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        return router
    }

    /// The registry's API, reading content from `port` (nil: not configured).
    func withRegistry(contentPort: Int?, key: String = contentKey, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger)
        registry.markReady()
        let firstContent = await contentPort.asyncMap { port in
            FirstContent(
                tickets: await ActivityTickets(secrets: [Self.ticketKid: Self.ticketSecret], required: true),
                source: ContentServiceClient(host: "127.0.0.1", port: port, key: key, timeout: .seconds(3), logger: quietLogger))
        }
        let router = Router()
        RegistryHTTPAPI(
            registry: registry, authenticator: try await Authenticator(settings: TestKeys.settings), maxBodyBytes: 8_192, logger: quietLogger,
            firstContent: firstContent
        ).addRoutes(to: router)
        try await Application(router: router, logger: quietLogger).test(.router) { client in try await body(client) }
    }

    static func headers(_ bearer: String?, ticket: String?) -> HTTPFields {
        var fields = HTTPFields()
        if let bearer { fields[.authorization] = bearer }
        if let ticket { fields[FirstContent.ticketHeader] = ticket }
        return fields
    }

    static func error(_ response: TestResponse) throws -> HTTPAPIError.Body {
        try IsletJSON.decodeValue(HTTPAPIError.Body.self, from: Array(response.body.readableBytesView))
    }

    @Test("the owner with its ticket gets content-service's answer byte for byte; content-service was asked with the registry's key, and nothing is written")
    func owner() async throws {
        let asked = Asked()
        let alice = try await TestKeys.bearer("alice")
        let ticket = try await Self.ticket(user: "alice")
        try await Application(router: Self.contentService(asked), logger: quietLogger).test(.live) { content in
            let port = try #require(content.port)
            try await withRegistry(contentPort: port) { client in
                try await client.execute(
                    uri: "/v1/activities/order-42/content?bundleId=com.example.food", method: .get, headers: Self.headers(alice, ticket: ticket)
                ) { response in
                    #expect(response.status == .ok && response.headers[.contentType] == "application/json")
                    #expect(String(buffer: response.body) == Self.content)
                }
            }
        }
        let calls = asked.calls.withLock { $0 }
        #expect(calls.count == 1)
        #expect(calls.first?.path == "/v1/activities/order-42/content?bundleId=com.example.food")
        #expect(calls.first?.authorization == "Bearer \(Self.contentKey)")
        #expect(publisher.records.isEmpty, "asking registers, owns and changes nothing")
    }

    @Test(
        "refused before content-service is asked: no JWT, no ticket, another user's ticket, a ticket for another activity or app, a forged ticket, no bundleId, a bad id"
    )
    func refusals() async throws {
        let asked = Asked()
        let (alice, mallory) = (try await TestKeys.bearer("alice"), try await TestKeys.bearer("mallory"))
        let alicesTicket = try await Self.ticket(user: "alice")
        let cases: [(bearer: String?, ticket: String?, uri: String, status: HTTPResponse.Status, field: String?)] = [
            (nil, alicesTicket, "/v1/activities/order-42/content?bundleId=com.example.food", .unauthorized, nil),
            (mallory, nil, "/v1/activities/order-42/content?bundleId=com.example.food", .forbidden, "ticket"),
            (mallory, alicesTicket, "/v1/activities/order-42/content?bundleId=com.example.food", .forbidden, "ticket"),
            (alice, try await Self.ticket(user: "alice", activity: "order-43"), "/v1/activities/order-42/content?bundleId=com.example.food", .forbidden, "ticket"),
            (alice, try await Self.ticket(user: "alice", bundleId: "com.example.ride"), "/v1/activities/order-42/content?bundleId=com.example.food", .forbidden, "ticket"),
            (alice, try await Self.ticket(user: "alice", secret: Array("another-secret-that-is-at-least-32-bytes!".utf8)),
             "/v1/activities/order-42/content?bundleId=com.example.food", .forbidden, "ticket"),
            (alice, alicesTicket, "/v1/activities/order-42/content", .badRequest, "bundleId"),
            (alice, alicesTicket, "/v1/activities/order-42/content?bundleId=food", .badRequest, "bundleId"),
            (alice, alicesTicket, "/v1/activities/order%3A42/content?bundleId=com.example.food", .badRequest, "activityId"),
        ]
        try await Application(router: Self.contentService(asked), logger: quietLogger).test(.live) { content in
            let port = try #require(content.port)
            try await withRegistry(contentPort: port) { client in
                for (index, refused) in cases.enumerated() {
                    try await client.execute(uri: refused.uri, method: .get, headers: Self.headers(refused.bearer, ticket: refused.ticket)) { response in
                        #expect(response.status == refused.status, "case \(index)")
                        let body = try Self.error(response)
                        #expect(body.field == refused.field, "case \(index): \(body.reason)")
                    }
                }
            }
        }
        #expect(asked.calls.withLock { $0.isEmpty }, "content-service is never asked for a refused call")
    }

    @Test("content-service's answers, relayed as the app needs them: 404 nothing announced, 409 started by push, 410 ended, 503 busy, down or without the route (Retry-After), 500 when it refuses the registry's key")
    func answers() async throws {
        let asked = Asked()
        let alice = try await TestKeys.bearer("alice")
        try await Application(router: Self.contentService(asked), logger: quietLogger).test(.live) { content in
            let port = try #require(content.port)
            let answers: [(String, HTTPResponse.Status, HTTPAPIError.Code)] = [
                ("order-44", .notFound, .notFound), ("order-45", .gone, .ended), ("order-46", .serviceUnavailable, .unavailable),
                ("order-47", .conflict, .conflict),
                // A 404 that is not about the activity: a content-service without the route (mid-upgrade), not "not announced".
                ("order-48", .serviceUnavailable, .unavailable),
            ]
            for (activity, status, code) in answers {
                let ticket = try await Self.ticket(user: "alice", activity: activity)
                try await withRegistry(contentPort: port) { client in
                    try await client.execute(uri: "/v1/activities/\(activity)/content?bundleId=com.example.food", method: .get, headers: Self.headers(alice, ticket: ticket)) { response in
                        #expect(response.status == status, "\(activity)")
                        let body = try Self.error(response)
                        #expect(body.error == code, "\(activity)")
                        if status == .serviceUnavailable { #expect(response.headers[.retryAfter] == "2") }
                    }
                }
            }
            // A key content-service does not take: the app cannot fix that; 500 (logged as an error), not the 401 of another service.
            let ticket = try await Self.ticket(user: "alice")
            try await withRegistry(contentPort: port, key: String(repeating: "x", count: 40)) { client in
                try await client.execute(uri: "/v1/activities/order-42/content?bundleId=com.example.food", method: .get, headers: Self.headers(alice, ticket: ticket)) { response in
                    #expect(response.status == .internalServerError)
                }
            }
        }
        // content-service down: its port closed now.
        let closed = try await Application(router: Router(), logger: quietLogger).test(.live) { $0.port ?? 0 }
        let ticket = try await Self.ticket(user: "alice")
        try await withRegistry(contentPort: closed) { client in
            try await client.execute(uri: "/v1/activities/order-42/content?bundleId=com.example.food", method: .get, headers: Self.headers(alice, ticket: ticket)) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "2")
            }
        }
    }

    @Test("a registry without ISLET_CONTENT_HTTP answers 501 naming it; the setting needs ticket keys and a key of at least 32 characters")
    func notConfigured() async throws {
        let alice = try await TestKeys.bearer("alice")
        try await withRegistry(contentPort: nil) { client in
            try await client.execute(uri: "/v1/activities/order-42/content?bundleId=com.example.food", method: .get, headers: Self.headers(alice, ticket: "x")) { response in
                #expect(response.status == .notImplemented)
                let body = try Self.error(response)
                #expect(body.error == .unavailable)
                #expect(body.reason.contains("ISLET_CONTENT_HTTP"))
            }
        }
        let base = ["ISLET_AUTH_HS256_KEYS": "hs=\(TestKeys.hsSecret)", "ISLET_CONTENT_HTTP": "content-service:8082"]
        #expect(throws: ConfigurationError.self) { try RegistrySettings(from: IsletConfig.variables(base)) }
        #expect(throws: ConfigurationError.self) {
            try RegistrySettings(from: IsletConfig.variables(base.merging(["ISLET_CONTENT_HTTP_KEY": Self.contentKey]) { $1 }))
        }
        let settings = try RegistrySettings(
            from: .variables(
                base.merging(["ISLET_CONTENT_HTTP_KEY": Self.contentKey, "ISLET_TICKET_HS256_KEYS": "orders=\(String(decoding: Self.ticketSecret, as: UTF8.self))"]) { $1 }))
        #expect(settings.content?.host == "content-service" && settings.content?.port == 8082 && settings.content?.key == Self.contentKey)
        let complete = base.merging(["ISLET_CONTENT_HTTP_KEY": Self.contentKey, "ISLET_TICKET_HS256_KEYS": "orders=\(String(decoding: Self.ticketSecret, as: UTF8.self))"]) { $1 }
        for (variable, value) in [("ISLET_CONTENT_HTTP", "http://content-service:8082"), ("ISLET_CONTENT_HTTP", "content-service"), ("ISLET_CONTENT_HTTP_KEY", "short")] {
            #expect(throws: ConfigurationError.self, "\(variable)=\(value)") { try RegistrySettings(from: .variables(complete.merging([variable: value]) { $1 })) }
        }
    }
}

extension Optional {
    fileprivate func asyncMap<T>(_ transform: (Wrapped) async throws -> T) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
