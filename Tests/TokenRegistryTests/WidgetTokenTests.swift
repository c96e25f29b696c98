import Foundation
import Hummingbird
import HummingbirdTesting
import IsletMessages
import IsletRuntime
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry

/// Issue 61 item 1: an app registers its WidgetKit push token (iOS 26) per device and widget kind.
@Suite("Widget tokens")
struct WidgetTokenTests {
    let publisher = RecordingPublisher()

    func withAPI(quota: Int = 100, _ body: @escaping @Sendable (any TestClientProtocol, Registry) async throws -> Void) async throws {
        let registry = Registry(
            table: TokenTable(), publisher: publisher, logger: quietLogger, quotas: .init(pushToStart: quota), clock: ManualClock(Date()))
        registry.markReady()
        let router = Router()
        RegistryHTTPAPI(registry: registry, authenticator: try await Authenticator(settings: TestKeys.settings), maxBodyBytes: 8_192, logger: quietLogger)
            .addRoutes(to: router)
        try await Application(router: router, logger: quietLogger).test(.router) { client in try await body(client, registry) }
    }

    static func body(_ value: some Encodable) throws -> ByteBuffer { ByteBuffer(bytes: try IsletJSON.encode(value)) }
    static func headers(_ bearer: String) -> HTTPFields { [.authorization: bearer, .contentType: "application/json"] }
    static let path = "/v1/apps/com.example.food/devices/device-7/widgets/OrderStatusWidget"

    @Test("register, read, rotate and invalidate a widget token; the record is a widget record under the widget key, the kind in attributesType")
    func routes() async throws {
        let alice = try await TestKeys.bearer("alice")
        try await withAPI { client, _ in
            let h = Self.headers(alice)
            let request = RegisterWidgetTokenRequest(token: hexToken(3), environment: .production, appVersion: "3.1")
            try await client.execute(uri: Self.path, method: .put, headers: h, body: try Self.body(request)) { response in
                #expect(response.status == .created)
                #expect(!String(buffer: response.body).contains(hexToken(3)), "a response never carries the token")
            }
            try await client.execute(uri: Self.path, method: .put, headers: h, body: try Self.body(request)) { response in
                let written = try IsletJSON.decodeValue(WriteResponse.self, from: Array(response.body.readableBytesView))
                #expect(written.change == .unchanged)
            }
            try await client.execute(uri: Self.path, method: .get, headers: h) { response in
                #expect(response.status == .ok)
                let view = try IsletJSON.decodeValue(TokenStateView.self, from: Array(response.body.readableBytesView))
                #expect(view.kind == .widget && view.state == .active)
            }
            let rotated = RegisterWidgetTokenRequest(token: hexToken(4), environment: .production, appVersion: "3.1")
            try await client.execute(uri: Self.path, method: .put, headers: h, body: try Self.body(rotated)) { response in
                let written = try IsletJSON.decodeValue(WriteResponse.self, from: Array(response.body.readableBytesView))
                #expect(written.change == .rotated)
            }
            try await client.execute(
                uri: Self.path + "/invalidate", method: .post, headers: h, body: try Self.body(InvalidateRequest(reason: .clientEnded))
            ) { #expect($0.status == .ok) }
        }
        let records = publisher.records
        #expect(records.map(\.state) == [.active, .active, .invalidated])
        let first = try #require(records.first)
        #expect(first.kind == .widget && first.attributesType == "OrderStatusWidget" && first.deviceId == "device-7" && first.activityId == nil)
        #expect(first.key == "wgt:com.example.food:device-7:OrderStatusWidget")
        #expect(throws: Never.self) { try first.validate() }
    }

    @Test("another user's device, a bad kind, a bad token, no credentials, or past the quota: a clear 4xx, nothing written")
    func refusals() async throws {
        let alice = try await TestKeys.bearer("alice")
        let mallory = try await TestKeys.bearer("mallory")
        try await withAPI(quota: 1) { client, _ in
            let request = RegisterWidgetTokenRequest(token: hexToken(3), environment: .production, appVersion: "3.1")
            try await client.execute(uri: Self.path, method: .put, headers: Self.headers(alice), body: try Self.body(request)) {
                #expect($0.status == .created)
            }
            let before = publisher.records.count
            func refused(_ path: String, _ bearer: String?, _ body: ByteBuffer, _ status: HTTPResponse.Status, field: String?) async throws {
                var headers: HTTPFields = [.contentType: "application/json"]
                if let bearer { headers[.authorization] = bearer }
                try await client.execute(uri: path, method: .put, headers: headers, body: body) { response in
                    #expect(response.status == status, "\(path)")
                    let error = try? IsletJSON.decodeValue(APIError.Body.self, from: Array(response.body.readableBytesView))
                    #expect(error?.reason.isEmpty == false, "\(path)")
                    if let field { #expect(error?.field == field, "\(path)") }
                }
            }
            try await refused(Self.path, mallory, try Self.body(request), .forbidden, field: "deviceId")
            try await refused("/v1/apps/com.example.food/devices/device-7/widgets/bad%3Akind", alice, try Self.body(request), .badRequest, field: "kind")
            try await refused(Self.path, alice, ByteBuffer(string: #"{"token":"xyz","environment":"production","appVersion":"3.1"}"#), .badRequest, field: "token")
            try await refused(Self.path, nil, try Self.body(request), .unauthorized, field: nil)
            try await refused("/v1/apps/com.example.food/devices/device-8/widgets/OrderStatusWidget", alice, try Self.body(request), .tooManyRequests, field: "deviceId")
            #expect(publisher.records.count == before, "nothing written")
        }
    }

    @Test("APNs's 410 for a widget push invalidates the widget token; a push-to-start token of the same device is another quota and stays")
    func invalidatedByAPNs() async throws {
        let alice = try await TestKeys.bearer("alice")
        try await withAPI(quota: 1) { client, registry in
            let h = Self.headers(alice)
            try await client.execute(
                uri: Self.path, method: .put, headers: h,
                body: try Self.body(RegisterWidgetTokenRequest(token: hexToken(3), environment: .production, appVersion: "3.1"))
            ) { #expect($0.status == .created) }
            // Widget tokens and push-to-start tokens have quotas of their own.
            try await client.execute(
                uri: "/v1/apps/com.example.food/devices/device-7/push-to-start/DeliveryAttributes", method: .put, headers: h,
                body: try Self.body(RegisterPushToStartTokenRequest(token: hexToken(5), environment: .production, frequentUpdatesEnabled: false, appVersion: "3.1"))
            ) { #expect($0.status == .created) }
            let key = MessageKey.widget(bundleId: "com.example.food", deviceId: "device-7", kind: "OrderStatusWidget")
            let outcome = PushOutcome(
                requestId: UUID().uuidString, result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered", timestamp: Date()),
                attempts: 1, tokenFingerprint: TokenFingerprint.of(token: hexToken(3)), completedAt: Date().addingTimeInterval(1), bundleId: "com.example.food",
                widgetKey: key)
            #expect(try await registry.handle(outcome) == .invalidate(.apnsUnregistered, since: outcome.apns?.timestamp))
            #expect(publisher.records.last?.key == key && publisher.records.last?.state == .invalidated)
            #expect(publisher.records.filter { $0.kind == .pushToStart }.allSatisfy { $0.state == .active }, "the push-to-start token stays")
        }
    }

    @Test("the device's one widget token registered under two kinds: APNs's 410 under one kills it under the other too; another token of the device, or the same token on another device, stands")
    func verdictCoversEveryKind() async throws {
        let alice = try await TestKeys.bearer("alice")
        try await withAPI { client, registry in
            func register(_ kind: String, _ token: String, device: String = "device-7") async throws {
                try await client.execute(
                    uri: "/v1/apps/com.example.food/devices/\(device)/widgets/\(kind)", method: .put, headers: Self.headers(alice),
                    body: try Self.body(RegisterWidgetTokenRequest(token: token, environment: .production, appVersion: "3.1"))
                ) { #expect($0.status == .created) }
            }
            try await register("OrderStatusWidget", hexToken(3))
            try await register("PromoWidget", hexToken(3))
            try await register("OtherWidget", hexToken(4))
            try await register("PromoWidget", hexToken(3), device: "device-8")
            let key = MessageKey.widget(bundleId: "com.example.food", deviceId: "device-7", kind: "OrderStatusWidget")
            let outcome = PushOutcome(
                requestId: UUID().uuidString, result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered", timestamp: Date().addingTimeInterval(60)),
                attempts: 1, tokenFingerprint: TokenFingerprint.of(token: hexToken(3)), completedAt: Date(), bundleId: "com.example.food", widgetKey: key)
            _ = try await registry.handle(outcome)
            func state(_ device: String, _ kind: String) -> TokenState? {
                registry.table.record(forKey: MessageKey.widget(bundleId: "com.example.food", deviceId: device, kind: kind))?.state
            }
            #expect(state("device-7", "OrderStatusWidget") == .invalidated)
            #expect(state("device-7", "PromoWidget") == .invalidated, "the same token under another kind")
            #expect(state("device-7", "OtherWidget") == .active, "another token")
            #expect(state("device-8", "PromoWidget") == .active, "another device")
        }
    }
}
