import ArgumentParser
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import SwiftProtobuf

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
