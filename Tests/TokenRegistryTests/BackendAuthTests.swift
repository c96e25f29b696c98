import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry
import SwiftProtobuf

@Suite("The backends' gRPC API: a key per backend, checked on every call, with read or write permission")
struct BackendAuthTests {
    static let readerKey = "reader-key-of-the-dashboard-at-least-32-chars"
    static let writerKey = "writer-key-of-the-orders-backend-32-chars-or-more"

    @Test("no key, a wrong key or two keys: UNAUTHENTICATED; a read-only key may look up but not invalidate (PERMISSION_DENIED); the writer may; nothing is written by a refused call")
    func keysAndPermissions() async throws {
        let publisher = RecordingPublisher()
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger)
        registry.markReady()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "a0", activityRequest(token: hexToken(0)))
        let written = publisher.records.count
        let keys = try BackendKeys(["dashboard": Self.readerKey + ":read", "orders": Self.writerKey + ":read+write"])
        try await withGRPCServer([RegistryGRPCService(registry: registry)], interceptors: [BackendAuthInterceptor(keys: keys, permissions: BackendAuthInterceptor.tokenRegistryMethods)]) { client in
            let registryClient = Islet_Tokens_V1_TokenRegistry.Client(wrapping: client)
            let lookup = Islet_Tokens_V1_LookupActivityRequest.with { $0.activityID = "a0" }
            let invalidate = Islet_Tokens_V1_InvalidateActivityRequest.with {
                $0.activityID = "a0"
                $0.reason = "backendEnded"
            }
            func code(_ call: () async throws -> Void) async -> RPCError.Code? {
                do {
                    try await call()
                    return nil
                } catch {
                    return (error as? RPCError)?.code
                }
            }
            #expect(await code { _ = try await registryClient.lookupActivity(lookup) } == .unauthenticated, "no key")
            #expect(await code { _ = try await registryClient.invalidateActivity(invalidate) } == .unauthenticated, "no key")
            #expect(await code { _ = try await registryClient.lookupActivity(lookup, metadata: ["authorization": "Bearer not-a-configured-key-but-long-enough"]) } == .unauthenticated)
            #expect(await code { _ = try await registryClient.lookupActivity(lookup, metadata: ["authorization": "Basic \(Self.readerKey)"]) } == .unauthenticated)
            var two: Metadata = ["authorization": "Bearer \(Self.readerKey)"]
            two.addString("Bearer \(Self.writerKey)", forKey: "authorization")
            #expect(await code { _ = try await registryClient.lookupActivity(lookup, metadata: two) } == .unauthenticated, "two keys")
            let reader: Metadata = ["authorization": "Bearer \(Self.readerKey)"]
            #expect(try await registryClient.lookupActivity(lookup, metadata: reader).userID == "alice")
            #expect(await code { _ = try await registryClient.invalidateActivity(invalidate, metadata: reader) } == .permissionDenied)
            #expect(publisher.records.count == written, "nothing written by a refused call")
            let ended = try await registryClient.invalidateActivity(invalidate, metadata: ["authorization": "Bearer \(Self.writerKey)"])
            #expect(ended.state == "invalidated")
        }
    }

    @Test("a key list that is malformed, short or shared is refused without quoting any key")
    func malformedKeys() {
        let secret = "a-secret-key-of-more-than-32-characters-in-it"
        for entries in [["a": secret], ["a": secret + ":admin"], ["a": "short:read"], ["a": secret + ":read", "b": secret + ":write"]] {
            do {
                _ = try BackendKeys(entries)
                Issue.record("accepted \(entries.keys.sorted())")
            } catch {
                #expect(!"\(error)".contains("secret-key"), "\(error)")
            }
        }
    }
}
