import APNsSimulator
import Crypto
import Foundation
import IsletMessages
import IsletRuntime
import IsletTesting
import NIOCore
import Testing
@testable import APNsDispatcher

/// Issue 61 item 3: since February 2025 an APNs key may be limited to one environment, or to a list
/// of topics. The dispatcher picks the key that covers each push's app and environment, keeps a
/// connection pool per key, and refuses a configuration that leaves an app without a key; the
/// simulator answers a key used outside its limits as APNs does.
@Suite("Scoped APNs keys")
struct ScopedKeyTests {
    static let sandboxKey = P256.Signing.PrivateKey()
    static let foodKey = P256.Signing.PrivateKey()
    static let team = signingKey.teamID

    @Test("the most limited key that covers the app and environment signs: topic-specific, then environment-only, then the team key; none: nil")
    func choice() {
        let keys = [
            APNsSigningKey(keyID: "TEAMKEY001", teamID: Self.team, privateKey: teamKey),
            APNsSigningKey(keyID: "PRODKEY001", teamID: Self.team, privateKey: teamKey, scope: .init(environment: .production)),
            APNsSigningKey(keyID: "FOODKEY001", teamID: Self.team, privateKey: teamKey, scope: .init(environment: .production, topics: ["com.example.food"])),
            APNsSigningKey(keyID: "OTHERTEAM1", teamID: "OTHER12345", privateKey: teamKey),
        ]
        func chosen(_ bundle: String, _ environment: APNsEnvironment, _ keys: [APNsSigningKey] = keys) -> String? {
            APNsSigningKey.choose(from: keys, teamID: Self.team, bundleID: bundle, environment: environment)?.keyID
        }
        #expect(chosen("com.example.food", .production) == "FOODKEY001")
        #expect(chosen("com.example.ride", .production) == "PRODKEY001")
        #expect(chosen("com.example.food", .sandbox) == "TEAMKEY001")
        #expect(chosen("com.example.food", .sandbox, Array(keys.dropFirst())) == nil, "no key of the team for sandbox")
    }

    static func settings(_ variables: [String: String]) throws -> DispatcherSettings {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var all: [String: String] = [:]
        for (name, value) in variables {
            all[name] = value.replacingOccurrences(of: "$DIR", with: directory.path)
        }
        for name in ["team.p8", "food.p8", "sandbox.p8"] {
            try P256.Signing.PrivateKey().pemRepresentation.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        return try DispatcherSettings(from: .variables(all))
    }

    @Test("ISLET_APNS_SCOPED_KEYS: KEYID=TEAMID:path:ENVIRONMENT:TOPICS beside the team keys; an app left without any key is refused at start-up; an app covered in one environment only is listed as uncovered in the other")
    func configuration() throws {
        let settings = try Self.settings([
            "ISLET_APNS_SCOPED_KEYS": "FOODKEY001=TEAM123456:$DIR/food.p8:production:com.example.food+com.example.pizza,SANDKEY001=TEAM123456:$DIR/sandbox.p8:sandbox:*",
            "ISLET_APNS_APPS": "com.example.food=TEAM123456,com.example.pizza=TEAM123456",
        ])
        #expect(settings.keys.map(\.keyID).sorted() == ["FOODKEY001", "SANDKEY001"])
        #expect(settings.keys.first { $0.keyID == "FOODKEY001" }?.scope == .init(environment: .production, topics: ["com.example.food", "com.example.pizza"]))
        #expect(settings.uncovered.isEmpty)
        #expect(
            settings.signers == [
                AppTarget(bundleId: "com.example.food", environment: .production): "FOODKEY001",
                AppTarget(bundleId: "com.example.pizza", environment: .production): "FOODKEY001",
                AppTarget(bundleId: "com.example.food", environment: .sandbox): "SANDKEY001",
                AppTarget(bundleId: "com.example.pizza", environment: .sandbox): "SANDKEY001",
            ], "each app's lane is the key that signs for it")
        let partly = try Self.settings([
            "ISLET_APNS_SCOPED_KEYS": "FOODKEY001=TEAM123456:$DIR/food.p8:production:com.example.food", "ISLET_APNS_APPS": "com.example.food=TEAM123456",
        ])
        #expect(partly.uncovered == [AppTarget(bundleId: "com.example.food", environment: .sandbox)])
        // An app no key covers: refused, naming it.
        #expect {
            try Self.settings([
                "ISLET_APNS_SCOPED_KEYS": "FOODKEY001=TEAM123456:$DIR/food.p8:production:com.example.food",
                "ISLET_APNS_APPS": "com.example.food=TEAM123456,com.example.ride=TEAM123456",
            ])
        } throws: { "\($0)".contains("com.example.ride") && "\($0)".contains("no key of team TEAM123456 covers") }
        for bad in [
            "FOODKEY001=TEAM123456:$DIR/food.p8:staging:*", "FOODKEY001=TEAM123456:$DIR/food.p8:production", "FOODKEY001=TEAM123456:$DIR/food.p8:*:a++b",
            "FOODKEY001=TEAM123456:$DIR/missing.p8:*:*",
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try Self.settings(["ISLET_APNS_SCOPED_KEYS": bad, "ISLET_APNS_APPS": "com.example.food=TEAM123456"])
            }
        }
        // A key id given twice, in one list or across teams: refused (one would be dropped, or sign with the wrong team).
        #expect(throws: ConfigurationError.self) {
            try Self.settings([
                "ISLET_APNS_SCOPED_KEYS": "FOODKEY001=TEAM123456:$DIR/food.p8:*:*,FOODKEY001=TEAM123456:$DIR/sandbox.p8:sandbox:*",
                "ISLET_APNS_APPS": "com.example.food=TEAM123456",
            ])
        }
        #expect(throws: ConfigurationError.self) {
            try Self.settings([
                "ISLET_APNS_KEYS": "TEAM123456=TEAMKEY001:$DIR/team.p8,TEAM999999=TEAMKEY001:$DIR/food.p8",
                "ISLET_APNS_APPS": "com.example.food=TEAM123456",
            ])
        }
        #expect(throws: ConfigurationError.self) {
            try Self.settings([
                "ISLET_APNS_KEYS": "TEAM123456=TEAMKEY001:$DIR/team.p8", "ISLET_APNS_SCOPED_KEYS": "TEAMKEY001=TEAM123456:$DIR/food.p8:*:*",
                "ISLET_APNS_APPS": "com.example.food=TEAM123456",
            ])
        }
        #expect {
            try Self.settings(["ISLET_APNS_KEYS": "TEAM123456=TEAM999999:$DIR/team.p8,TEAM999999=KEY0000001:$DIR/food.p8", "ISLET_APNS_APPS": "com.example.food=TEAM123456"])
        } throws: { "\($0)".contains("is also a team id") }
        // The team keys alone, as before.
        let teamOnly = try Self.settings(["ISLET_APNS_KEYS": "TEAM123456=TEAMKEY001:$DIR/team.p8", "ISLET_APNS_APPS": "com.example.food=TEAM123456"])
        #expect(teamOnly.keys.map(\.scope) == [.team] && teamOnly.uncovered.isEmpty && teamOnly.signers.isEmpty, "one key per team: the lanes are the teams'")
    }

    @Test("a request of an app no key covers in its environment is rejected at once, naming the missing key")
    func uncoveredRejected() {
        let h = EngineHarness(uncovered: [AppTarget(bundleId: "com.example.food", environment: .production)])
        h.register("a", token: hexToken(1))
        h.submit(h.request("a", .update, sequence: 1))
        let outcome = h.outcomes(1).first
        #expect(outcome?.result == .rejected && outcome?.detail?.contains("no APNs signing key covers com.example.food in production") == true)
        #expect(h.sender.sent.isEmpty)
    }

    @Test("with scoped keys each key is a lane of its own: a key APNs refuses (403) holds only the pushes it signs; the app signed by another key of the same team goes on")
    func lanePerKey() throws {
        let (food, taxi) = (AppTarget(bundleId: "com.example.food", environment: .production), AppTarget(bundleId: "com.example.taxi", environment: .production))
        let h = EngineHarness(
            teams: ["com.example.food": Self.team, "com.example.taxi": Self.team], signers: [food: "FOODKEY001", taxi: "TEAMKEY001"])
        h.register("a", token: hexToken(1))
        h.register("taxi", token: hexToken(4), bundleId: "com.example.taxi")
        h.sender.script(hexToken(1), [APNsAnswer(status: 403, reason: "BadEnvironmentKeyInToken")])
        h.submit(h.request("a", sequence: 1, supersedable: false))
        let ride = h.request("taxi", sequence: 1, bundleId: "com.example.taxi")
        h.submit(ride)
        #expect(h.outcomes(1).map(\.requestId) == [ride.requestId], "the team's other key is not stopped")
        // The sender is told the key, not the team.
        h.hold()
        h.submit(h.request("taxi", sequence: 2, bundleId: "com.example.taxi"))
        #expect(h.takeHeld().team == "TEAMKEY001")
    }

    /// A simulator playing production that knows the team key, a sandbox-only key and a key for the food app only.
    func withScopedSimulator(_ body: @escaping @Sendable (APNsSimulatorServer, Int, String) async throws -> Void) async throws {
        let tls = try SimulatorTLS.selfSigned()
        let server = APNsSimulatorServer(
            configuration: .init(
                keys: [
                    .init(keyID: signingKey.keyID, teamID: Self.team, publicKey: teamKey.publicKey),
                    .init(keyID: "SANDKEY001", teamID: Self.team, publicKey: Self.sandboxKey.publicKey, environment: .sandbox),
                    .init(keyID: "FOODKEY001", teamID: Self.team, publicKey: Self.foodKey.publicKey, environment: .production, topics: ["com.example.food"]),
                ],
                tls: tls, environment: .production),
            logger: quietLogger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            try await body(server, try await server.listeningPort, tls.certificatePEM)
            group.cancelAll()
        }
    }

    func client(port: Int, trust: String, keys: [APNsSigningKey]) throws -> APNsClient {
        var configuration = APNsClient.Configuration(connectionsPerLane: 1, requestTimeout: .seconds(5), trustedCertificatesPEM: trust)
        configuration.useEverywhere(APNsClient.Endpoint(host: "127.0.0.1", port: port))
        return try APNsClient(configuration: configuration, keys: keys, logger: quietLogger)
    }

    func ridePush(_ token: String) -> APNsPush {
        APNsPush(deviceToken: token, topic: "com.example.ride.push-type.liveactivity", priority: 10, apnsID: UUID().uuidString.lowercased(), expiration: 0, payload: .init(string: payload()))
    }

    @Test("each push goes with the key that covers its app, on that key's own connections (never mixed); a key used outside its limits is answered as APNs does: another environment 403 BadEnvironmentKeyInToken, another topic 400 TopicDisallowed")
    func againstTheSimulator() async throws {
        try await withScopedSimulator { server, port, trust in
            let keys = [
                signingKey,
                APNsSigningKey(keyID: "FOODKEY001", teamID: Self.team, privateKey: Self.foodKey, scope: .init(environment: .production, topics: ["com.example.food"])),
            ]
            let client = try client(port: port, trust: trust, keys: keys)
            let food = try await client.send(push(hexToken(1)), teamID: Self.team, environment: .production)
            let ride = try await client.send(ridePush(hexToken(2)), teamID: Self.team, environment: .production)
            #expect(food.status == 200 && ride.status == 200)
            let received = server.state.notifications()
            let foodConnection = received.first { $0.token == hexToken(1) }?.connection
            let rideConnection = received.first { $0.token == hexToken(2) }?.connection
            #expect(foodConnection != nil && rideConnection != nil && foodConnection != rideConnection, "one connection pool per key")
            client.shutdown()

            // Misconfigured: the sandbox key taken for a key of both environments.
            let wrongEnvironment = try self.client(port: port, trust: trust, keys: [APNsSigningKey(keyID: "SANDKEY001", teamID: Self.team, privateKey: Self.sandboxKey)])
            let refused = try await wrongEnvironment.send(push(hexToken(3)), teamID: Self.team, environment: .production)
            #expect(refused.status == 403 && refused.reason == "BadEnvironmentKeyInToken")
            wrongEnvironment.shutdown()
            // The food app's key taken for the whole team: a push of another app is refused.
            let wrongTopic = try self.client(port: port, trust: trust, keys: [APNsSigningKey(keyID: "FOODKEY001", teamID: Self.team, privateKey: Self.foodKey)])
            let topic = try await wrongTopic.send(ridePush(hexToken(4)), teamID: Self.team, environment: .production)
            #expect(topic.status == 400 && topic.reason == "TopicDisallowed")
            wrongTopic.shutdown()
            #expect(!server.state.notifications().contains { [hexToken(3), hexToken(4)].contains($0.token) })

            // The broadcast API with the food app's key: its own channels and broadcasts; another app's refused.
            let scoped = try self.client(port: port, trust: trust, keys: [keys[1]])
            let channel = try await scoped.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: Self.team, environment: .production)
            let sent = try await scoped.send(broadcast(channel), teamID: Self.team, environment: .production)
            #expect(sent.status == 200, "\(sent)")
            await #expect(throws: APNsChannelError.self) {
                _ = try await wrongTopic.createChannel(bundleID: "com.example.ride", storagePolicy: .noMessageStored, teamID: Self.team, environment: .production)
            }
            scoped.shutdown()
        }
    }
}
