import ArgumentParser
import Foundation
import IsletKafka
import Logging

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
