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

/// `islet stale`: live activities whose content on the phone is out of date (content-service's gRPC ListStaleActivities).
struct StaleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stale",
        abstract: "List stale activities, most stale first (content-service's gRPC ListStaleActivities).")

    @Option(name: .customLong("content-grpc"), help: "content-service's gRPC host:port (default: $ISLET_CLI_CONTENT_GRPC, else localhost:9083).")
    var endpoint: String?

    @Option(help: "At most this many (1...1000, default 100).")
    var limit: Int32 = 100

    @OptionGroup var key: BackendKeyOption

    func validate() throws {
        guard (1...1_000).contains(limit) else { throw ValidationError("--limit must be in 1...1000") }
    }

    mutating func run() async throws {
        let target = try HostPort.resolve(endpoint, variable: "ISLET_CLI_CONTENT_GRPC", default: "localhost:9083")
        let limit = self.limit
        let metadata = try key.metadata()
        let response = try await withGRPCClient(
            transport: .http2NIOPosix(target: .dns(host: target.host, port: target.port), transportSecurity: .plaintext)
        ) { client in
            try await Islet_Content_V1_ActivityService.Client(wrapping: client).listStaleActivities(.with { $0.limit = limit }, metadata: metadata)
        }
        print(Self.describe(response.activities, now: Date()))
    }

    /// One line per activity: id, type, freshness, since when (and how long ago), sequence, re-sends.
    static func describe(_ activities: [Islet_Content_V1_StaleActivity], now: Date) -> String {
        guard !activities.isEmpty else { return "no stale activities" }
        return activities.map { activity in
            let since = activity.hasStaleSince ? activity.staleSince.date : nil
            let age = since.map { " (\(Self.age(now.timeIntervalSince($0))) ago)" } ?? ""
            return [
                activity.bundleID.isEmpty ? activity.activityID : "\(activity.bundleID)/\(activity.activityID)", activity.attributesType,
                activity.freshness,
                "stale since \(since.map(IsletDate.format) ?? "-")\(age)", "content seq \(activity.contentSequence)",
                "resends \(activity.resends)",
            ].joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// `45s`, `12m`, `3h 5m`.
    static func age(_ interval: TimeInterval) -> String {
        let seconds = max(0, Int(interval.rounded(.down)))
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3_600 { return "\(seconds / 60)m" }
        let minutes = seconds / 60 % 60
        return minutes == 0 ? "\(seconds / 3_600)h" : "\(seconds / 3_600)h \(minutes)m"
    }
}

/// The backend key the gRPC lookups present (`authorization: Bearer <key>`; the services'
/// `ISLET_GRPC_KEYS` must list it with `read`).
struct BackendKeyOption: ParsableArguments {
    @Option(name: .customLong("grpc-key"), help: "The backend key for the gRPC APIs (default: $ISLET_CLI_GRPC_KEY).")
    var key: String?

    func metadata(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Metadata {
        guard let key = key ?? environment["ISLET_CLI_GRPC_KEY"], !key.isEmpty else {
            throw ValidationError("the gRPC APIs need a backend key: --grpc-key or ISLET_CLI_GRPC_KEY (one of the services' ISLET_GRPC_KEYS, with read)")
        }
        return ["authorization": "Bearer \(key)"]
    }
}
