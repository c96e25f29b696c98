// islet: Islet's admin command line (docs/cli.md). Each subcommand is a thin shell around a function
// that tests call directly; the commands only parse arguments and print.
import ArgumentParser
import Foundation
import IsletKafka
import Logging

@main
struct Islet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet",
        abstract: "Islet's admin tool: publish events, register test tokens, tail topics, look at activities.",
        discussion: "Every command is described, with examples, in docs/cli.md.",
        subcommands: [PublishEvent.self, RegisterToken.self, Tail.self, ActivityCommand.self, StaleCommand.self])
}

/// Where Kafka is, for the commands that talk to it.
struct KafkaOptions: ParsableArguments {
    @Option(
        name: .customLong("bootstrap"),
        help: "Kafka brokers, host:port[,host:port…] (default: $ISLET_KAFKA_BOOTSTRAP, else localhost:9094, the compose file's listener for the host).")
    var bootstrap: String?

    @Flag(name: .customLong("verbose"), help: "Log what the Kafka client does (to standard error).")
    var verbose = false

    func servers(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let bootstrap, !bootstrap.isEmpty { return bootstrap }
        if let value = environment["ISLET_KAFKA_BOOTSTRAP"], !value.isEmpty { return value }
        return "localhost:9094"
    }

    /// librdkafka's security properties from `ISLET_KAFKA_SECURITY_PROTOCOL`, `ISLET_KAFKA_SASL_*`,
    /// `ISLET_KAFKA_SSL_*` (``KafkaSecurity``), as the services read them.
    func security(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String: String] {
        KafkaSecurity.properties(from: environment)
    }

    var logger: Logger { CLILog.logger(verbose: verbose) }
}

enum CLILog {
    /// A logger to standard error, without bootstrapping the global logging system (tests run
    /// commands in-process).
    static func logger(verbose: Bool) -> Logger {
        var logger = Logger(label: "islet.cli") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .error
        return logger
    }
}

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
