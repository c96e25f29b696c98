import Foundation
import IsletKafka
import IsletTesting
import Logging
import Synchronization
import Testing

let testLogger = IsletTesting.testLogger("islet.test")

func makeProducer(_ servers: String, settings: [String: String] = [:]) throws -> KafkaProducer {
    try KafkaProducer(configuration: .init(bootstrapServers: servers, settings: settings), logger: testLogger)
}

func makeConsumer(_ servers: String, group: String, topics: [String], settings: [String: String] = [:]) throws -> KafkaConsumer {
    try KafkaConsumer(configuration: .init(bootstrapServers: servers, groupID: group, topics: topics, settings: settings), logger: testLogger)
}

func createTopic(_ servers: String, _ name: String, partitions: Int, configs: [String: String] = [:]) async throws {
    let admin = try KafkaAdmin(configuration: .init(bootstrapServers: servers), logger: testLogger)
    _ = try await admin.createTopics([.init(name: name, partitions: partitions, configs: configs)])
}

/// A Kafka client with a run loop and a way to stop it.
protocol KafkaClient: Sendable {
    func run() async throws
    func shutdown()
}

extension KafkaProducer: KafkaClient {}
extension KafkaConsumer: KafkaClient {}

/// Runs the clients for the duration of `body` (bounded by `limit`), then shuts them down and waits
/// for their run loops: producers flush, consumers commit and leave their group.
func withRunning<T: Sendable>(
    _ clients: [any KafkaClient], limit: Duration = .seconds(60), _ what: String = "the test body",
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withTimeout(limit, what) {
        try await withThrowingTaskGroup(of: T?.self) { group in
            for client in clients {
                group.addTask { try await client.run(); return nil }
            }
            let result: T
            do {
                result = try await body()
            } catch {
                for client in clients { client.shutdown() }
                while (try? await group.next()) != nil {}
                throw error
            }
            for client in clients { client.shutdown() }
            try await group.waitForAll()
            return result
        }
    }
}

/// A producer running for the duration of `body`, shut down (flushed) afterwards.
func withProducer<T: Sendable>(_ producer: KafkaProducer, _ body: @escaping @Sendable (KafkaProducer) async throws -> T) async throws -> T {
    try await withRunning([producer]) { try await body(producer) }
}

/// A counter tasks can share.
final class SharedCounter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}
