import ArgumentParser
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import SwiftProtobuf

/// `islet activity <id>`: an activity's token state from token-registry's gRPC LookupActivity.
struct ActivityCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activity",
        abstract: "Show an activity's token state (token-registry's gRPC LookupActivity; the token only as a fingerprint).")

    @Argument(help: "The activity id, e.g. order-42.")
    var activityId: String

    @Option(name: .customLong("bundle-id"), help: "The activity's app (needed when the id is registered in several apps).")
    var bundleId: String?

    @Option(name: .customLong("registry-grpc"), help: "token-registry's gRPC host:port (default: $ISLET_CLI_REGISTRY_GRPC, else localhost:9081).")
    var endpoint: String?

    @OptionGroup var key: BackendKeyOption

    mutating func run() async throws {
        let target = try HostPort.resolve(endpoint, variable: "ISLET_CLI_REGISTRY_GRPC", default: "localhost:9081")
        let (id, bundle) = (activityId, bundleId ?? "")
        let metadata = try key.metadata()
        do {
            let state = try await withGRPCClient(
                transport: .http2NIOPosix(target: .dns(host: target.host, port: target.port), transportSecurity: .plaintext)
            ) { client in
                try await Islet_Tokens_V1_TokenRegistry.Client(wrapping: client).lookupActivity(
                    .with {
                        $0.activityID = id
                        $0.bundleID = bundle
                    }, metadata: metadata)
            }
            print(Self.describe(state))
        } catch let error as RPCError where error.code == .notFound {
            FileHandle.standardError.write(Data("token-registry knows no activity \(id)\(bundle.isEmpty ? "" : " in \(bundle)")\n".utf8))
            throw ExitCode(1)
        } catch let error as RPCError where error.code == .failedPrecondition {
            FileHandle.standardError.write(Data("\(error.message)\n".utf8))
            throw ExitCode(1)
        }
    }

    /// One `name  value` line per field; unset times are left out.
    static func describe(_ state: Islet_Tokens_V1_ActivityState) -> String {
        var rows: [(String, String)] = [
            ("activity", state.activityID), ("state", state.state), ("kind", state.kind), ("user", state.userID),
            ("app", "\(state.bundleID) (\(state.environment))"), ("attributes type", state.attributesType),
            ("frequent updates", state.frequentUpdatesEnabled ? "enabled" : "disabled"), ("app version", state.appVersion),
            ("token", "\(state.tokenFingerprint) (fingerprint)"),
        ]
        if !state.invalidationReason.isEmpty { rows.append(("invalidated", state.invalidationReason)) }
        if state.hasInvalidatedAt { rows.append(("invalidated at", IsletDate.format(state.invalidatedAt.date))) }
        if state.hasActivityStartedAt { rows.append(("started at", IsletDate.format(state.activityStartedAt.date))) }
        if state.hasRegisteredAt { rows.append(("registered at", IsletDate.format(state.registeredAt.date))) }
        if state.hasUpdatedAt { rows.append(("updated at", IsletDate.format(state.updatedAt.date))) }
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { name, value in name.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value }.joined(separator: "\n")
    }
}
