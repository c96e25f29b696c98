import ArgumentParser
import Foundation
import IsletDemoKit
import IsletKafka
import IsletMessages
import UnixSignals

/// A broker for benchmarks whose reads do not get slower as it fills: librdkafka's mock cluster (one
/// broker, in memory, in this process; real Kafka protocol over TCP) with every Islet topic and the
/// extra topics named by `--topic NAME:PARTITIONS`. It keeps about the last 5 MB of each partition.
/// Prints `ISLET_KAFKA_BOOTSTRAP=host:port` and runs until SIGTERM or SIGINT (scripts/broker.sh
/// starts it with `ISLET_BROKER=mock`). It creates no topic on request: the mock cluster has no
/// CreateTopics.
struct MockBroker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mock-broker")
    @Option var partitions = 4
    @Option(name: .customLong("topic"), help: "NAME:PARTITIONS, another topic to create (repeatable)") var topics: [String] = []

    func run() async throws {
        var wanted = IsletTopics.all.map { ($0.name, partitions) }
        for spec in topics {
            let parts = spec.split(separator: ":")
            guard parts.count == 2, let count = Int(parts[1]), count > 0 else {
                throw ValidationError("--topic takes NAME:PARTITIONS, got \(spec)")
            }
            wanted.append((String(parts[0]), count))
        }
        let cluster = try KafkaMockCluster(brokers: 1)
        for (name, count) in wanted { try cluster.createTopic(name, partitions: count) }
        // Unbuffered: the script reads it while this process keeps running.
        FileHandle.standardOutput.write(Data("ISLET_KAFKA_BOOTSTRAP=\(cluster.bootstrapServers)\n".utf8))
        for await _ in await UnixSignalsSequence(trapping: .sigterm, .sigint) { break }
        withExtendedLifetime(cluster) {}
    }
}
