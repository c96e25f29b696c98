import APNsSimulator
import Crypto
import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization
@testable import APNsDispatcher

let quietLogger = testLogger("islet.test.apns", level: .critical)

/// A team's signing key, known to the simulator.
let teamKey = P256.Signing.PrivateKey()
let signingKey = APNsSigningKey(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: teamKey)

func payload(event: String = "update", timestamp: Int64 = 1_795_000_000, alert: Bool = false, extra: String = "") -> String {
    let alertPart = alert ? #","alert":{"title":"Out for delivery","body":"Ana is on the way"},"sound":"default""# : ""
    let startPart = event == "start" ? #","attributes-type":"DeliveryAttributes","attributes":{"orderId":"42"}"# + (alert ? "" : #","alert":{"title":"Order placed"}"#) : ""
    return #"{"aps":{"event":"\#(event)","timestamp":\#(timestamp),"content-state":{"status":"outForDelivery"\#(extra)}\#(alertPart)\#(startPart)}}"#
}

/// A simulator on a free port, run for the duration of `body`.
func withSimulator<T: Sendable>(
    maxConcurrentStreams: Int = 1_000, clock: any WallClock = SystemWallClock(), state: SimulatorState = SimulatorState(),
    _ body: @escaping @Sendable (APNsSimulatorServer, Int, String) async throws -> T
) async throws -> T {
    let tls = try SimulatorTLS.selfSigned()
    let server = APNsSimulatorServer(
        configuration: .init(
            keys: [.init(keyID: signingKey.keyID, teamID: signingKey.teamID, publicKey: teamKey.publicKey)], tls: tls,
            maxConcurrentStreams: maxConcurrentStreams, clock: clock),
        state: state, logger: quietLogger)
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask {
            try await server.run()
            return nil
        }
        let port = try await server.listeningPort
        let result = try await body(server, port, tls.certificatePEM)
        group.cancelAll()
        return result
    }
}

func makeClient(
    port: Int, trust: String, connections: Int = 1, timeout: Duration = .seconds(5), connectTimeout: Duration = .seconds(5),
    clock: any WallClock = SystemWallClock()
) throws -> APNsClient {
    var configuration = APNsClient.Configuration(
        connectionsPerLane: connections, requestTimeout: timeout, connectTimeout: connectTimeout, trustedCertificatesPEM: trust)
    // Pushes, broadcasts and channel management all at the simulator.
    configuration.useEverywhere(APNsClient.Endpoint(host: "127.0.0.1", port: port))
    return try APNsClient(configuration: configuration, keys: [signingKey], logger: quietLogger, clock: clock)
}

func push(_ token: String, priority: Int = 10, payload text: String = payload(), apnsID: String = UUID().uuidString.lowercased()) -> APNsPush {
    APNsPush(
        deviceToken: token, topic: "com.example.food.push-type.liveactivity", priority: priority, apnsID: apnsID, expiration: 0,
        payload: ByteBuffer(string: text))
}

extension PartitionTokens {
    /// A table holding partition 0, where ``put(_:key:)`` writes.
    static func forTests() -> PartitionTokens {
        let tokens = PartitionTokens()
        tokens.own(partitions: [0])
        return tokens
    }

    private static let offsets = Atomic<Int64>(0)

    /// Applies `record` as the next record of partition 0.
    func put(_ record: TokenRecord, key: String) {
        apply(record, key: key, partition: 0, offset: Self.offsets.add(1, ordering: .relaxed).newValue)
    }
}
