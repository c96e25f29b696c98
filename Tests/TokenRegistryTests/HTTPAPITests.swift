import Foundation
import Hummingbird
import HummingbirdTesting
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry
import IsletRuntime

@Suite("The app's HTTP API, in process")
struct HTTPAPITests {
    let publisher = RecordingPublisher()

    func withAPI(_ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        // A clock that does not move: what a repeat within a second answers does not depend on how
        // loaded the machine is.
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: ManualClock(Date()))
        registry.markReady()
        let router = Router()
        RegistryHTTPAPI(registry: registry, authenticator: try await Authenticator(settings: TestKeys.settings), maxBodyBytes: 8_192, logger: quietLogger)
            .addRoutes(to: router)
        try await Application(router: router, logger: quietLogger).test(.router) { client in try await body(client) }
    }

    static func body(_ value: some Encodable) throws -> ByteBuffer { ByteBuffer(bytes: try IsletJSON.encode(value)) }
    static func written(_ response: TestResponse) throws -> WriteResponse {
        try IsletJSON.decodeValue(WriteResponse.self, from: Array(response.body.readableBytesView))
    }

    static func headers(_ bearer: String) -> HTTPFields { [.authorization: bearer, .contentType: "application/json"] }

    @Test("every route works for the token's owner: register, read, rotate, frequent updates, invalidate; push-to-start too")
    func everyRoute() async throws {
        let alice = try await TestKeys.bearer("alice")
        let aliceES = try await TestKeys.bearer("alice", kid: "es")
        try await withAPI { client in
            let h = Self.headers(alice)
            try await client.execute(uri: "/v1/activities/order-42/token", method: .put, headers: h, body: try Self.body(activityRequest())) { response in
                #expect(response.status == .created)
                let result = try IsletJSON.decodeValue(WriteResponse.self, from: Array(response.body.readableBytesView))
                #expect(result.change == .registered)
                #expect(!String(buffer: response.body).contains(hexToken(1)), "a response never carries the token")
            }
            try await client.execute(uri: "/v1/activities/order-42", method: .get, headers: Self.headers(aliceES)) { response in
                #expect(response.status == .ok)
                let view = try IsletJSON.decodeValue(TokenStateView.self, from: Array(response.body.readableBytesView))
                #expect(view.activityId == "order-42")
                #expect(view.state == .active)
            }
            try await client.execute(
                uri: "/v1/activities/order-42/token", method: .put, headers: h, body: try Self.body(activityRequest(token: hexToken(2)))
            ) { response in
                #expect(response.status == .ok)
                let result = try Self.written(response)
                #expect(result.change == .rotated)
            }
            try await client.execute(
                uri: "/v1/activities/order-42/frequent-updates", method: .put, headers: h, body: try Self.body(FrequentUpdatesRequest(enabled: true))
            ) { response in
                #expect(response.status == .ok)
                let result = try Self.written(response)
                #expect(result.token.frequentUpdatesEnabled)
            }
            try await client.execute(
                uri: "/v1/activities/order-42/invalidate", method: .post, headers: h, body: try Self.body(InvalidateRequest(reason: .userDismissed))
            ) { response in
                #expect(response.status == .ok)
                let result = try IsletJSON.decodeValue(WriteResponse.self, from: Array(response.body.readableBytesView))
                #expect(result.token.state == .invalidated)
                #expect(result.token.invalidation?.reason == .userDismissed)
            }
            let pts = "/v1/apps/com.example.ride/devices/device-7/push-to-start/RideAttributes"
            let ptsBody = RegisterPushToStartTokenRequest(token: hexToken(3), environment: .production, frequentUpdatesEnabled: true, appVersion: "3.1")
            try await client.execute(uri: pts, method: .put, headers: h, body: try Self.body(ptsBody)) { #expect($0.status == .created) }
            try await client.execute(uri: pts, method: .put, headers: h, body: try Self.body(ptsBody)) { response in
                #expect(response.status == .ok)
                let result = try Self.written(response)
                #expect(result.change == .unchanged)
            }
            try await client.execute(uri: pts, method: .get, headers: h) { #expect($0.status == .ok) }
            try await client.execute(uri: pts + "/invalidate", method: .post, headers: h, body: try Self.body(InvalidateRequest(reason: .ineligible))) {
                #expect($0.status == .ok)
            }
        }
        #expect(publisher.records.map(\.state) == [.active, .active, .active, .invalidated, .active, .invalidated])
    }

    /// A hostile or malformed request and what it must get.
    struct Case: Sendable, CustomStringConvertible {
        var description: String
        var method: HTTPRequest.Method = .put
        var path = "/v1/activities/a-1/token"
        var bearer: Bearer = .alice
        var contentType: String? = "application/json"
        var body: [UInt8]? = nil
        var status: HTTPResponse.Status
        var field: String? = nil

        enum Bearer: Sendable { case none, raw(String), alice, mallory, expired, wrongSecret, unknownKid, algorithmSwap }
    }

    static func bodyWith(_ change: (inout [String: Any]) -> Void) -> [UInt8] {
        var object: [String: Any] = [
            "token": hexToken(4), "attributesType": "DeliveryAttributes", "app": ["bundleId": "com.example.food", "environment": "production"],
            "frequentUpdatesEnabled": false, "appVersion": "5.2.0",
        ]
        change(&object)
        return Array(try! JSONSerialization.data(withJSONObject: object))
    }

    static let cases: [Case] = [
        Case(description: "no Authorization header", bearer: .none, body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "Basic instead of Bearer", bearer: .raw("Basic dXNlcjpwYXNz"), body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "a bearer that is not a JWT", bearer: .raw("Bearer not-a-jwt"), body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "an expired JWT", bearer: .expired, body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "a JWT signed with the wrong secret", bearer: .wrongSecret, body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "a JWT naming an unknown key", bearer: .unknownKid, body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "an HS256 JWT naming the ES256 key", bearer: .algorithmSwap, body: bodyWith { _ in }, status: .unauthorized),
        Case(description: "a body that is not JSON", body: Array("token=abc".utf8), status: .badRequest),
        Case(description: "a JSON array instead of an object", body: Array("[1,2,3]".utf8), status: .badRequest),
        Case(description: "bytes that are not UTF-8", body: [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D], status: .badRequest),
        Case(description: "a JSON nesting bomb", body: Array((String(repeating: "[", count: 3_000) + String(repeating: "]", count: 3_000)).utf8), status: .badRequest),
        Case(description: "the token missing", body: bodyWith { $0["token"] = nil }, status: .badRequest, field: "token"),
        Case(description: "the token a number", body: bodyWith { $0["token"] = 1234 }, status: .badRequest, field: "token"),
        Case(description: "an empty token", body: bodyWith { $0["token"] = "" }, status: .badRequest, field: "token"),
        Case(description: "a token of odd length (63 hex digits)", body: bodyWith { $0["token"] = String(repeating: "a", count: 63) }, status: .badRequest, field: "token"),
        Case(description: "a token with non-hex characters", body: bodyWith { $0["token"] = String(repeating: "zz", count: 40) }, status: .badRequest, field: "token"),
        Case(description: "a token of 8 bytes", body: bodyWith { $0["token"] = String(repeating: "ab", count: 8) }, status: .badRequest, field: "token"),
        Case(description: "a token of 300 bytes", body: bodyWith { $0["token"] = String(repeating: "ab", count: 300) }, status: .badRequest, field: "token"),
        Case(description: "a 10 KB token", body: bodyWith { $0["token"] = String(repeating: "ab", count: 5_000) }, status: .contentTooLarge),
        Case(description: "an unknown environment", body: bodyWith { $0["app"] = ["bundleId": "com.example.food", "environment": "staging"] }, status: .badRequest, field: "app.environment"),
        Case(description: "a bundle id without dots", body: bodyWith { $0["app"] = ["bundleId": "example", "environment": "production"] }, status: .badRequest, field: "app.bundleId"),
        Case(description: "an attributes type that is not a type name", body: bodyWith { $0["attributesType"] = "1 Bad" }, status: .badRequest, field: "attributesType"),
        Case(description: "an app version that is not a version", body: bodyWith { $0["appVersion"] = "latest" }, status: .badRequest, field: "appVersion"),
        Case(description: "a locale that is not a language tag", body: bodyWith { $0["locale"] = "Chinese (Simplified)" }, status: .badRequest, field: "locale"),
        Case(description: "a locale of 60 characters", body: bodyWith { $0["locale"] = "zh-" + String(repeating: "a", count: 57) }, status: .badRequest, field: "locale"),
        Case(description: "a locale that is a number", body: bodyWith { $0["locale"] = 7 }, status: .badRequest, field: "locale"),
        Case(description: "frequentUpdatesEnabled a string", body: bodyWith { $0["frequentUpdatesEnabled"] = "yes" }, status: .badRequest, field: "frequentUpdatesEnabled"),
        Case(description: "a start time that is not a date", body: bodyWith { $0["activityStartedAt"] = "yesterday" }, status: .badRequest, field: "activityStartedAt"),
        Case(description: "a start time in the future", body: bodyWith { $0["activityStartedAt"] = IsletDate.format(Date().addingTimeInterval(86_400)) }, status: .badRequest, field: "activityStartedAt"),
        Case(description: "an activity id with a colon", path: "/v1/activities/pts:a/token", body: bodyWith { _ in }, status: .badRequest, field: "activityId"),
        Case(description: "an activity id of 200 characters", path: "/v1/activities/\(String(repeating: "a", count: 200))/token", body: bodyWith { _ in }, status: .badRequest, field: "activityId"),
        Case(description: "a body over 8 KB", body: bodyWith { $0["padding"] = String(repeating: "x", count: 9_000) }, status: .contentTooLarge),
        Case(description: "text/plain", contentType: "text/plain", body: bodyWith { _ in }, status: .unsupportedMediaType),
        Case(description: "no content type", contentType: nil, body: bodyWith { _ in }, status: .unsupportedMediaType),
        Case(description: "another user's activity", path: "/v1/activities/owned/token", body: bodyWith { _ in }, status: .forbidden, field: "activityId"),
        Case(description: "reading another user's activity", method: .get, path: "/v1/activities/owned", status: .notFound),
        Case(description: "invalidating another user's activity", method: .post, path: "/v1/activities/owned/invalidate", body: Array(#"{"reason":"userDismissed"}"#.utf8), status: .notFound),
        Case(description: "an unknown invalidation reason", method: .post, path: "/v1/activities/owned/invalidate", bearer: .mallory, body: Array(#"{"reason":"bored"}"#.utf8), status: .badRequest, field: "reason"),
        Case(description: "an APNs reason from the app", method: .post, path: "/v1/activities/owned/invalidate", bearer: .mallory, body: Array(#"{"reason":"apnsUnregistered"}"#.utf8), status: .badRequest, field: "reason"),
        Case(description: "a bad device id", path: "/v1/apps/com.example.ride/devices/dev%20ice/push-to-start/RideAttributes", body: Array(#"{"token":"\#(hexToken(5))","environment":"production","frequentUpdatesEnabled":false,"appVersion":"1.0"}"#.utf8), status: .badRequest, field: "deviceId"),
        Case(description: "an unknown route", method: .get, path: "/v1/tokens", status: .notFound),
        Case(description: "a method the route does not take", method: .delete, path: "/v1/activities/owned", status: .notFound),
    ]

    @Test("hostile and malformed requests: each a 4xx with a JSON reason, and nothing written")
    func hostileRequests() async throws {
        let now = Date()
        let bearers: [String: String] = [
            "alice": try await TestKeys.bearer("alice"), "mallory": try await TestKeys.bearer("mallory"),
            "expired": try await TestKeys.bearer("alice", expiresIn: -60, now: now),
            "wrongSecret": try await TestKeys.bearer("alice", secret: "another-secret-that-is-32-bytes-or-more!"),
            "unknownKid": try await TestKeys.bearer("alice", kid: "nope"),
            "algorithmSwap": try await TestKeys.bearer("alice", kid: "es-as-hs"),
        ]
        let publisher = self.publisher
        try await withAPI { client in
            // "owned" belongs to mallory.
            try await client.execute(
                uri: "/v1/activities/owned/token", method: .put, headers: Self.headers(bearers["mallory"]!), body: try Self.body(activityRequest())
            ) { #expect($0.status == .created) }
            let written = publisher.records.count
            for c in Self.cases {
                var headers: HTTPFields = [:]
                if let contentType = c.contentType { headers[.contentType] = contentType }
                switch c.bearer {
                case .none: break
                case .raw(let value): headers[.authorization] = value
                case .alice: headers[.authorization] = bearers["alice"]
                case .mallory: headers[.authorization] = bearers["mallory"]
                case .expired: headers[.authorization] = bearers["expired"]
                case .wrongSecret: headers[.authorization] = bearers["wrongSecret"]
                case .unknownKid: headers[.authorization] = bearers["unknownKid"]
                case .algorithmSwap: headers[.authorization] = bearers["algorithmSwap"]
                }
                try await client.execute(uri: c.path, method: c.method, headers: headers, body: c.body.map { ByteBuffer(bytes: $0) }) { response in
                    #expect(response.status == c.status, "\(c.description)")
                    #expect((400..<500).contains(response.status.code), "\(c.description)")
                    #expect(response.headers[.contentType] == "application/json", "\(c.description)")
                    let error = try? IsletJSON.decodeValue(APIError.Body.self, from: Array(response.body.readableBytesView))
                    #expect(error?.reason.isEmpty == false, "\(c.description): \(String(buffer: response.body))")
                    if let field = c.field { #expect(error?.field == field, "\(c.description): \(String(buffer: response.body))") }
                }
            }
            #expect(publisher.records.count == written, "a refused request wrote something")
        }
    }
}
