import ArgumentParser
import Foundation
import IsletKafka
import Logging

/// An endpoint `host:port` for a gRPC client.
struct HostPort: Sendable, Hashable, CustomStringConvertible {
    var host: String
    var port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `localhost:9081`, `10.0.0.5:9081`, `[::1]:9081`.
    init?(parsing text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65_535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.init(host: host, port: port)
    }

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// An option value, else an environment variable, else the default.
    static func resolve(_ option: String?, variable: String, default defaultValue: String,
                        environment: [String: String] = ProcessInfo.processInfo.environment) throws -> HostPort {
        let text = option ?? environment[variable].flatMap { $0.isEmpty ? nil : $0 } ?? defaultValue
        guard let endpoint = HostPort(parsing: text) else {
            throw ValidationError("expected host:port, got \"\(text)\"")
        }
        return endpoint
    }
}
