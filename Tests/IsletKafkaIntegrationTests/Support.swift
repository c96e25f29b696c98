import Foundation
import IsletKafka
import Logging
import Synchronization
import Testing

/// The broker the test script started (`ISLET_KAFKA_BOOTSTRAP`).
enum TestBroker {
    static var bootstrapServers: String? { ProcessInfo.processInfo.environment["ISLET_KAFKA_BOOTSTRAP"] }

    /// scripts/test.sh sets ISLET_REQUIRE_BROKER=1: then a missing broker fails the tests instead of skipping them.
    static var shouldRun: Bool {
        bootstrapServers != nil || ProcessInfo.processInfo.environment["ISLET_REQUIRE_BROKER"] == "1"
    }

    static func servers() throws -> String {
        try #require(bootstrapServers, "ISLET_KAFKA_BOOTSTRAP is not set: run the tests with scripts/test.sh")
    }
}

func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
}

let testLogger: Logger = {
    var logger = Logger(label: "islet.test")
    logger.logLevel = ProcessInfo.processInfo.environment["ISLET_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .error
    return logger
}()

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

/// Fails the test if `operation` takes longer than `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ what: String, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        guard let first = try await group.next(), let result = first else {
            group.cancelAll()
            throw TimeoutError(what: what, limit: limit)
        }
        group.cancelAll()
        return result
    }
}

struct TimeoutError: Error, CustomStringConvertible {
    var what: String
    var limit: Duration
    var description: String { "\(what) did not finish within \(limit)" }
}

/// A counter tasks can share.
final class SharedCounter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}
