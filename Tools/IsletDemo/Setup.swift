import ArgumentParser
import Foundation
import IsletDemoKit
import IsletKafka
import IsletMessages

/// Creates every Islet topic (4 partitions; compaction and retention as in docs/topics.md).
struct Setup: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var partitions = 4

    func run() async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        _ = try await admin.createTopics(IsletTopics.all.map { .init(name: $0.name, partitions: partitions, configs: $0.configs) })
        print("topics: \(IsletTopics.all.map(\.name).joined(separator: ", "))")
    }
}
