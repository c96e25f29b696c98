import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry
import SwiftProtobuf

@Suite("The backends' gRPC API, through a real server", .timeLimit(.minutes(1)))
struct GRPCTests {
    @Test("lookup, list a user's live activities, invalidate; unknown and invalid requests get their status codes")
    func api() async throws {
        let publisher = RecordingPublisher()
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger)
        registry.markReady()
        for i in 0..<3 {
            _ = try await registry.registerActivityToken(user: "alice", activityId: "a\(i)", activityRequest(token: hexToken(i)))
        }
        _ = try await registry.registerActivityToken(user: "bob", activityId: "b0", activityRequest(token: hexToken(9)))
        _ = try await registry.invalidateActivity(user: "alice", activityId: "a2", reason: .clientEnded)

        try await withGRPCServer([RegistryGRPCService(registry: registry)]) { client in
            let registryClient = Islet_Tokens_V1_TokenRegistry.Client(wrapping: client)

            let a0 = try await registryClient.lookupActivity(.with { $0.activityID = "a0" })
            #expect(a0.userID == "alice")
            #expect(a0.state == "active")
            #expect(a0.bundleID == "com.example.food")
            #expect(a0.environment == "production")
            #expect(a0.tokenFingerprint == TokenFingerprint.of(token: hexToken(0)))
            #expect(a0.registeredAt.seconds > 0)

            let live = try await registryClient.listUserActivities(.with { $0.userID = "alice" })
            #expect(Set(live.activities.map(\.activityID)) == ["a0", "a1"])

            let ended = try await registryClient.invalidateActivity(.with {
                $0.activityID = "a1"
                $0.reason = "backendEnded"
            })
            #expect(ended.state == "invalidated")
            #expect(ended.invalidationReason == "backendEnded")
            #expect(publisher.records.last?.invalidation?.reason == .backendEnded)

            await #expect { try await registryClient.lookupActivity(.with { $0.activityID = "nope" }) } throws: {
                ($0 as? RPCError)?.code == .notFound
            }
            await #expect { try await registryClient.lookupActivity(.with { $0.activityID = "a:b" }) } throws: {
                ($0 as? RPCError)?.code == .invalidArgument
            }
            await #expect {
                try await registryClient.invalidateActivity(.with {
                    $0.activityID = "a0"
                    $0.reason = "apnsUnregistered"
                })
            } throws: { ($0 as? RPCError)?.code == .invalidArgument }
            await #expect { try await registryClient.listUserActivities(.with { $0.userID = "" }) } throws: {
                ($0 as? RPCError)?.code == .invalidArgument
            }
        }
    }

    @Test("a gRPC port in use stops the server with the address, the variables and the reason")
    func portInUse() async throws {
        let taken = try TakenPort()
        defer { taken.close() }
        let server = GRPCServerService(host: "127.0.0.1", port: taken.port, services: [])
        let error = await #expect(throws: ListenerBindError.self) {
            try await Listener(server, name: "grpc", host: "127.0.0.1", port: taken.port, variables: ["ISLET_GRPC_HOST", "ISLET_GRPC_PORT"]).run()
        }
        #expect(
            error?.description
                == "cannot listen on 127.0.0.1:\(taken.port) (grpc: ISLET_GRPC_HOST, ISLET_GRPC_PORT): the port is in use by another process (`ss -ltnp 'sport = :\(taken.port)'` names it)"
        )
    }
}
