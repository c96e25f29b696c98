import APNsSimulator
import Foundation
import IsletMessages
import IsletTesting
import NIOCore
import Synchronization
import Testing
@testable import APNsDispatcher
import NIOPosix

@Suite("HTTP/2 client against the simulator, over TLS", .timeLimit(.minutes(2)))
struct ClientSimulatorTests {
    @Test("a push is delivered with its headers and payload; the simulator records what the phone receives")
    func delivered() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            let id = UUID().uuidString.lowercased()
            let answer = try await client.send(push(hexToken(1), priority: 5, apnsID: id), teamID: signingKey.teamID, environment: .production)
            #expect(answer.status == 200)
            #expect(answer.apnsID == id)
            let recorded = try #require(server.state.notifications(token: hexToken(1)).first)
            #expect(recorded.apnsID == id)
            #expect(recorded.priority == 5)
            #expect(recorded.topic == "com.example.food.push-type.liveactivity")
            #expect(recorded.event == "update")
            #expect(recorded.payload == payload())
            client.shutdown()
        }
    }

    @Test("many pushes share few connections, concurrently")
    func concurrent() async throws {
        try await withSimulator(maxConcurrentStreams: 8) { server, port, trust in
            let client = try makeClient(port: port, trust: trust, connections: 2, timeout: .seconds(60))  // 400 sends queue for 16 streams: not a deadline test
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<400 {
                    group.addTask { try await client.send(push(hexToken(i)), teamID: signingKey.teamID, environment: .sandbox).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 400)
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(server.state.stats.accepted == 400)
            #expect(server.state.stats.connections <= 2)
            client.shutdown()
        }
    }

    @Test("injected answers come back as APNs sends them: 410 with its timestamp, 429, 400, 500, 503")
    func injectedAnswers() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            let when = Date(timeIntervalSince1970: 1_795_000_123.456)
            server.state.add(.reject(410, "Unregistered", token: hexToken(1), timestamp: when))
            server.state.add(.reject(429, "TooManyRequests", token: hexToken(2)))
            server.state.add(.reject(400, "BadDeviceToken", token: hexToken(3)))
            server.state.add(.reject(500, "InternalServerError", token: hexToken(4)))
            server.state.add(.reject(503, "ServiceUnavailable", token: hexToken(5)))
            func answer(_ seed: Int) async throws -> APNsAnswer {
                try await client.send(push(hexToken(seed)), teamID: signingKey.teamID, environment: .production)
            }
            let gone = try await answer(1)
            #expect(gone.status == 410)
            #expect(gone.reason == "Unregistered")
            #expect(gone.timestamp.map { abs($0.timeIntervalSince(when)) < 0.002 } == true)
            let throttled = try await answer(2)
            #expect(throttled.status == 429)
            #expect(throttled.reason == "TooManyRequests")
            #expect(try await answer(3).reason == "BadDeviceToken")
            #expect(try await answer(4).status == 500)
            #expect(try await answer(5).reason == "ServiceUnavailable")
            #expect(try await answer(1).status == 200, "a fault applies as many times as it says")
            client.shutdown()
        }
    }

    @Test("GOAWAY: the push on the stream past the last one processed is reported as not processed; the next one opens a new connection")
    func goAway() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            _ = try await client.send(push(hexToken(1)), teamID: signingKey.teamID, environment: .production)
            server.state.add(Fault(kind: .goAway))
            let error = await #expect(throws: APNsTransportError.self) {
                try await client.send(push(hexToken(2)), teamID: signingKey.teamID, environment: .production)
            }
            #expect(error?.kind == .notProcessed)
            #expect(error?.isAmbiguous == false)
            // The connection that sent GOAWAY takes no new stream: the next push opens another, at once.
            #expect(try await client.send(push(hexToken(2)), teamID: signingKey.teamID, environment: .production).status == 200)
            #expect(server.state.stats.connections == 2)
            #expect(server.state.notifications(token: hexToken(2)).count == 1, "the stream past GOAWAY was not processed")
            client.shutdown()
        }
    }

    @Test("a reset connection and a stalled answer are reported as possibly delivered")
    func resetAndStall() async throws {
        try await withSimulator { server, port, trust in
            // The reset with a patient deadline: under a loaded test run, connecting alone can take
            // more than a second, and an attempt whose request was never written is a stall, not
            // the ambiguous loss this checks.
            let patient = try makeClient(port: port, trust: trust, timeout: .seconds(10))
            server.state.add(Fault(kind: .reset))
            let reset = await #expect(throws: APNsTransportError.self) {
                try await patient.send(push(hexToken(1)), teamID: signingKey.teamID, environment: .production)
            }
            #expect(reset?.isAmbiguous == true, "\(String(describing: reset))")
            let client = try makeClient(port: port, trust: trust, timeout: .seconds(1))
            // A new connection, established before the stall (so the deadline measures only the answer).
            var reconnected = false
            for _ in 0..<20 where !reconnected {
                reconnected = (try? await client.send(push(hexToken(9)), teamID: signingKey.teamID, environment: .production).status) == 200
            }
            #expect(reconnected)
            server.state.add(Fault(kind: .stall))
            let stalled = await #expect(throws: APNsTransportError.self) {
                try await client.send(push(hexToken(2)), teamID: signingKey.teamID, environment: .production)
            }
            #expect(stalled?.kind == .timeout)
            #expect(server.state.stats.stalled == 1)
            #expect(try await patient.send(push(hexToken(3)), teamID: signingKey.teamID, environment: .production).status == 200)
            patient.shutdown()
            client.shutdown()
        }
    }

    @Test("provider tokens: an hour-old token gets 403 ExpiredProviderToken; a renewal on a new connection is accepted")
    func expiredProviderToken() async throws {
        // The client's clock two hours behind the simulator's (the system's).
        let clock = ManualClock(Date().addingTimeInterval(-7_200))
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust, clock: clock)
            let expired = try await client.send(push(hexToken(1)), teamID: signingKey.teamID, environment: .production)
            #expect(expired.status == 403)
            #expect(expired.reason == "ExpiredProviderToken")
            #expect(APNsAction.forAnswer(status: expired.status, reason: expired.reason) == .renewProviderToken)
            clock.advance(7_200)
            client.renewProviderToken(teamID: signingKey.teamID)
            #expect(try await client.send(push(hexToken(1)), teamID: signingKey.teamID, environment: .production).status == 200)
            #expect(server.state.stats.rejected["429 TooManyProviderTokenUpdates"] == nil)
            client.shutdown()
        }
    }

    @Test("a second provider token on one connection within 20 minutes gets 429 TooManyProviderTokenUpdates")
    func tokenChurnOnAConnection() async throws {
        try await withSimulator { _, port, trust in
            let connection = try await APNsConnection.connect(
                id: 1, host: "127.0.0.1", port: port, sslContext: try makeClient(port: port, trust: trust).sslContext, serverHostname: nil,
                connectTimeout: .seconds(5), group: .singletonMultiThreadedEventLoopGroup)
            let first = try await signingKey.providerToken(issuedAt: Date())
            let second = try await signingKey.providerToken(issuedAt: Date().addingTimeInterval(-10))
            #expect(try await connection.send(push(hexToken(1)), authorization: first, deadline: .now() + .seconds(5)).status == 200)
            let churn = try await connection.send(push(hexToken(1)), authorization: second, deadline: .now() + .seconds(5))
            #expect(churn.status == 429)
            #expect(churn.reason == "TooManyProviderTokenUpdates")
            connection.close()
        }
    }
}

/// A value tests change while a closure reads it.
final class Shared<Value: Sendable>: Sendable {
    private let stored: Mutex<Value>
    init(_ value: Value) { stored = Mutex(value) }
    var value: Value {
        get { stored.withLock { $0 } }
        set { stored.withLock { $0 = newValue } }
    }
}
