import APNsSimulator
import Crypto
import Foundation
import JWTKit
import IsletMessages
import IsletTesting
import Testing
@testable import APNsDispatcher

@Suite("The APNs simulator's rules")
struct SimulatorRuleTests {
    func request(
        method: String = "POST", path: String = "/3/device/\(hexToken(1))", headers: [String: String] = [:], body: String = payload()
    ) -> NotificationValidator.Request {
        var all = [
            "apns-push-type": "liveactivity", "apns-topic": "com.example.food.push-type.liveactivity", "apns-priority": "10",
            "apns-id": UUID().uuidString,
        ]
        all.merge(headers) { $1 }
        return NotificationValidator.Request(method: method, path: path, headers: all.filter { !$0.value.isEmpty }, body: Array(body.utf8))
    }

    func verdict(_ request: NotificationValidator.Request) -> String {
        switch NotificationValidator.token(of: request) {
        case .failure(let rejection): return rejection.description
        case .success(let token):
            switch NotificationValidator.validate(request, token: token, now: Date(), connection: 1, stream: 1) {
            case .failure(let rejection): return rejection.description
            case .success: return "200"
            }
        }
    }

    @Test("a valid Live Activity push is accepted; each broken part gets APNs's status and reason")
    func validation() {
        #expect(verdict(request()) == "200")
        #expect(verdict(request(body: payload(event: "start"))) == "200")
        #expect(verdict(request(body: payload(event: "end"))) == "200")
        #expect(verdict(request(method: "GET")) == "405 MethodNotAllowed")
        #expect(verdict(request(path: "/3/other/abc")) == "404 BadPath")
        #expect(verdict(request(path: "/3/device/")) == "400 MissingDeviceToken")
        #expect(verdict(request(path: "/3/device/xyz")) == "400 BadDeviceToken")
        #expect(verdict(request(path: "/3/device/\(String(repeating: "a", count: 63))")) == "400 BadDeviceToken")
        #expect(verdict(request(headers: ["apns-push-type": "alert"])) == "400 InvalidPushType")
        #expect(verdict(request(headers: ["apns-topic": ""])) == "400 MissingTopic")
        #expect(verdict(request(headers: ["apns-topic": "com.example.food"])) == "400 BadTopic")
        #expect(verdict(request(headers: ["apns-priority": "1"])) == "400 BadPriority")
        #expect(verdict(request(headers: ["apns-id": "not-a-uuid"])) == "400 BadMessageId")
        #expect(verdict(request(headers: ["apns-expiration": "soon"])) == "400 BadExpirationDate")
        #expect(verdict(request(headers: ["apns-collapse-id": String(repeating: "c", count: 65)])) == "400 BadCollapseId")
        #expect(verdict(request(body: "")) == "400 PayloadEmpty")
        #expect(verdict(request(body: payload(extra: #","pad":"\#(String(repeating: "x", count: 4_100))""#))) == "413 PayloadTooLarge")
        #expect(verdict(request(body: "{not json")) == "400 BadPayload")
        #expect(verdict(request(body: #"{"aps":{"event":"pause","timestamp":1,"content-state":{}}}"#)) == "400 BadPayload")
        #expect(verdict(request(body: #"{"aps":{"event":"update","timestamp":"now","content-state":{}}}"#)) == "400 BadPayload")
        #expect(verdict(request(body: #"{"aps":{"event":"update","timestamp":1}}"#)) == "400 BadPayload")
        #expect(verdict(request(body: #"{"aps":{"event":"start","timestamp":1,"content-state":{}}}"#)) == "400 BadPayload")
    }

    @Test("a WidgetKit push (iOS 26) is taken with its own push type, its own topic and a body of content-changed only; mixed with a Live Activity's, refused")
    func widgetPushes() throws {
        let widgets = ["apns-push-type": "widgets", "apns-topic": "com.example.food.push-type.widgets", "apns-priority": "5"]
        let reload = #"{"aps":{"content-changed":true}}"#
        #expect(verdict(request(headers: widgets, body: reload)) == "200")
        #expect(verdict(request(headers: widgets.merging(["apns-topic": "com.example.food.push-type.liveactivity"]) { $1 }, body: reload)) == "400 BadTopic")
        #expect(verdict(request(headers: ["apns-topic": "com.example.food.push-type.widgets"], body: payload())) == "400 BadTopic")
        #expect(verdict(request(headers: widgets, body: payload())) == "400 BadPayload", "a Live Activity's body is not a widget push")
        #expect(verdict(request(headers: widgets, body: #"{"aps":{"content-changed":false}}"#)) == "400 BadPayload")
        #expect(verdict(request(headers: widgets, body: #"{"aps":{"content-changed":true,"alert":"hi"}}"#)) == "400 BadPayload")
        #expect(verdict(request(headers: widgets, body: "{}")) == "400 BadPayload")
        guard case .success(let token) = NotificationValidator.token(of: request()),
            case .success(let accepted) = NotificationValidator.validate(request(headers: widgets, body: reload), token: token, now: Date(), connection: 1, stream: 1)
        else {
            Issue.record("not accepted")
            return
        }
        #expect(accepted.pushType == "widgets" && accepted.event == AcceptedNotification.widgetEvent && accepted.priority == 5)
        // The broadcast API takes Live Activity pushes only.
        let channel = try JSONDecoder().decode(
            SimulatedChannel.self,
            from: Data(#"{"id":"Y2hhbm5lbA==","bundleId":"com.example.food","storagePolicy":0,"createdAt":0,"subscribers":1,"broadcasts":0}"#.utf8))
        let broadcast = NotificationValidator.Request(
            method: "POST", path: "/4/broadcasts/apps/com.example.food",
            headers: ["apns-push-type": "widgets", "apns-channel-id": channel.id, "apns-expiration": "0", "apns-priority": "5"], body: Array(reload.utf8))
        guard case .failure(let refusal) = BroadcastValidator.validate(broadcast, channel: channel, requestId: UUID().uuidString, now: Date(), connection: 1)
        else {
            Issue.record("a widget broadcast was taken")
            return
        }
        #expect(refusal.description == "400 InvalidPushType")
    }

    @Test("a broadcast without apns-expiration is refused (required on every broadcast since 2025), as is one with a bad value; with it, taken")
    func broadcastNeedsExpiration() throws {
        let channel = try IsletJSON.decodeValue(
            SimulatedChannel.self,
            from: Array(#"{"id":"c2NvcmVz","bundleId":"com.example.food","storagePolicy":0,"createdAt":"2026-12-07T00:00:00Z","subscribers":0,"broadcasts":0}"#.utf8))
        func verdict(_ expiration: String?) -> String {
            var headers = ["apns-push-type": "liveactivity", "apns-priority": "10", "apns-channel-id": channel.id]
            headers["apns-expiration"] = expiration
            let request = NotificationValidator.Request(
                method: "POST", path: "/4/broadcasts/apps/com.example.food", headers: headers, body: Array(payload().utf8))
            switch BroadcastValidator.validate(request, channel: channel, requestId: "r", now: Date(), connection: 1) {
            case .failure(let rejection): return rejection.description
            case .success: return "200"
            }
        }
        #expect(verdict(nil) == "400 BadExpirationDate")
        #expect(verdict("later") == "400 BadExpirationDate")
        #expect(verdict("0") == "200")
    }

    /// The payload check as it was written on a JSONValue tree of the whole document (the reference
    /// for the check that reads only the aps fields).
    static func acceptedByTree(_ body: String) -> Bool {
        guard let payload = try? IsletJSON.decodeValue(JSONValue.self, from: Array(body.utf8)), let aps = payload["aps"], case .object = aps,
            let event = aps["event"]?.stringValue, ["start", "update", "end"].contains(event), case .integer = aps["timestamp"],
            case .object = aps["content-state"]
        else { return false }
        if event == "start" {
            guard aps["attributes-type"]?.stringValue != nil, case .object = aps["attributes"], aps["alert"] != nil else { return false }
        }
        return true
    }

    @Test(
        "the payload check reading only the aps fields gives the verdicts of a check of the whole JSON tree",
        arguments: [
            #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":12.0,"content-state":{"a":[1,{"b":null}]}}}"#,
            #"{"aps":{"event":"update","timestamp":1.2e1,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":12.5,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":1e30,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":-3,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":"12","content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":null,"content-state":{}}}"#,
            #"{"aps":{"event":"update","timestamp":1,"content-state":[]}}"#,
            #"{"aps":{"event":"update","timestamp":1,"content-state":null}}"#,
            #"{"aps":{"event":7,"timestamp":1,"content-state":{}}}"#,
            #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"alert":{"title":"x"}}}"#,
            #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"alert":null}}"#,
            #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{}}}"#,
            #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":5,"attributes":{},"alert":"x"}}"#,
            #"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":"x","alert":"x"}}"#,
            #"{"aps":null}"#, #"{"aps":[]}"#, #"[]"#, #"{}"#, #""aps""#,
            #"{"aps":{"event":"update","timestamp":1,"content-state":{}}} trailing"#,
            #"{"aps":{"event":"update","timestamp":1,"content-state":{}},"other":[1,2,}"#,
            #"{"aps":{"event":"end","timestamp":1,"content-state":{},"dismissal-date":5},"deep":[[[[[[[[{}]]]]]]]]}"#,
        ])
    func payloadShape(_ body: String) {
        let accepted = verdict(request(body: body)) == "200"
        #expect(accepted == Self.acceptedByTree(body), "\(body)")
    }

    @Test(
        "a value the check does not read is checked for JSON syntax only (the tree check also refused what Swift cannot represent)",
        arguments: [
            #"{"aps":{"event":"update","timestamp":1,"content-state":{"eta":1e400}}}"#,
            #"{"aps":{"event":"update","timestamp":1,"content-state":{"name":"\ud800"}}}"#,
        ])
    func unreadValues(_ body: String) {
        #expect(verdict(request(body: body)) == "200")
        #expect(!Self.acceptedByTree(body))
        #expect(verdict(request(body: String(body.dropLast()))) == "400 BadPayload", "still parsed whole")
    }

    @Test("provider tokens: known key and team, valid signature, less than an hour old")
    func providerTokens() async throws {
        let verifier = try await ProviderTokenVerifier(keys: [.init(keyID: signingKey.keyID, teamID: signingKey.teamID, publicKey: teamKey.publicKey)])
        let now = Date()
        let token = try await signingKey.providerToken(issuedAt: now.addingTimeInterval(-60))
        #expect(await verifier.verify(authorization: "bearer \(token)", now: now).map(\.teamID) == .success(signingKey.teamID))
        #expect(await verifier.verify(authorization: nil, now: now) == .failure(.missing))
        #expect(await verifier.verify(authorization: "bearer a.b.c", now: now) == .failure(.invalid))
        #expect(await verifier.verify(authorization: "basic \(token)", now: now) == .failure(.invalid))
        let old = try await signingKey.providerToken(issuedAt: now.addingTimeInterval(-3_700))
        #expect(await verifier.verify(authorization: "bearer \(old)", now: now) == .failure(.expired))
        let future = try await signingKey.providerToken(issuedAt: now.addingTimeInterval(120))
        #expect(await verifier.verify(authorization: "bearer \(future)", now: now) == .failure(.invalid))
        let otherTeam = APNsSigningKey(keyID: signingKey.keyID, teamID: "OTHERTEAM1", privateKey: teamKey)
        #expect(await verifier.verify(authorization: "bearer \(try await otherTeam.providerToken(issuedAt: now))", now: now) == .failure(.invalid))
        let otherKey = APNsSigningKey(keyID: signingKey.keyID, teamID: signingKey.teamID, privateKey: P256.Signing.PrivateKey())
        #expect(await verifier.verify(authorization: "bearer \(try await otherKey.providerToken(issuedAt: now))", now: now) == .failure(.invalid))
        let unknownKey = APNsSigningKey(keyID: "UNKNOWNKEY", teamID: signingKey.teamID, privateKey: teamKey)
        #expect(await verifier.verify(authorization: "bearer \(try await unknownKey.providerToken(issuedAt: now))", now: now) == .failure(.invalid))
        // A fractional iat (APNs reads whole seconds): refused.
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(backing: teamKey), kid: JWKIdentifier(string: signingKey.keyID))
        let fractional = try await keys.sign(
            FractionalClaims(iss: .init(value: signingKey.teamID), iat: .init(value: Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down) - 30.5))), kid: JWKIdentifier(string: signingKey.keyID))
        #expect(await verifier.verify(authorization: "bearer \(fractional)", now: now) == .failure(.invalid))
        // The header names another algorithm over the same claims and signature: refused.
        let parts = token.split(separator: ".").map(String.init)
        let hs256 = Data(#"{"alg":"HS256","kid":"\#(signingKey.keyID)"}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        #expect(await verifier.verify(authorization: "bearer \(hs256).\(parts[1]).\(parts[2])", now: now) == .failure(.invalid))
    }

    @Test("a provider token is what APNs documents: header alg ES256 and kid, claims iss and iat in whole seconds")
    func providerTokenShape() async throws {
        let token = try await signingKey.providerToken(issuedAt: Date(timeIntervalSince1970: 1_800_000_000.75))
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        func object(_ part: Substring) throws -> [String: Any] {
            let data = try #require(Data(base64Encoded: base64(part)))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        let header = try object(parts[0])
        #expect(header["alg"] as? String == "ES256")
        #expect(header["kid"] as? String == signingKey.keyID)
        let claims = try object(parts[1])
        #expect(Set(claims.keys) == ["iss", "iat"])
        #expect(claims["iss"] as? String == signingKey.teamID)
        let iatText = try #require(String(data: try JSONSerialization.data(withJSONObject: ["iat": claims["iat"]!]), encoding: .utf8))
        #expect(iatText == #"{"iat":1800000000}"#)
        let signature = try #require(Data(base64Encoded: base64(parts[2])))
        #expect(signature.count == 64, "ES256's raw r‖s, as APNs expects")
    }

    private func base64(_ part: Substring) -> String {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }

    @Test("a connection takes a new provider token at most every 20 minutes")
    func tokenChurn() {
        var state = ConnectionTokenState()
        let start = Date()
        let first = state.admit("a", now: start)
        let same = state.admit("a", now: start.addingTimeInterval(60))
        let tooSoon = state.admit("b", now: start.addingTimeInterval(19 * 60))
        let later = state.admit("b", now: start.addingTimeInterval(20 * 60))
        #expect(first && same && !tooSoon && later)
    }
}

private struct FractionalClaims: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim
    func verify(using algorithm: some JWTAlgorithm) throws {}
}
