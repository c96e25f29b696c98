import Foundation
import IsletKafka
import IsletMessages
import Logging

/// The broker scripts/test.sh started (`ISLET_KAFKA_BOOTSTRAP`). With `ISLET_REQUIRE_BROKER=1` a
/// missing broker fails the suites that need one instead of skipping them.
public enum TestBroker {
    public static var bootstrapServers: String? { ProcessInfo.processInfo.environment["ISLET_KAFKA_BOOTSTRAP"] }

    /// Whether the suites that need a broker run (`.enabled(if: TestBroker.shouldRun)`).
    public static var shouldRun: Bool {
        bootstrapServers != nil || ProcessInfo.processInfo.environment["ISLET_REQUIRE_BROKER"] == "1"
    }

    /// The bootstrap servers, or an error that says how to get a broker.
    public static func servers() throws -> String {
        guard let bootstrapServers else { throw TestSetupError("ISLET_KAFKA_BOOTSTRAP is not set: run the tests with scripts/test.sh") }
        return bootstrapServers
    }

    /// Reads `count` records of `topic` from the start (any order across partitions); gives up after
    /// `timeout` and returns what it read.
    public static func read(_ topic: String, count: Int, timeout: Duration = .seconds(30)) async throws -> [KafkaMessage] {
        try await TopicSnapshot.read([topic], bootstrapServers: try servers(), timeout: timeout, logger: testLogger("islet.test.reader")) {
            $0.messages.count >= count
        }.messages
    }

    /// Reads `count` records of `topic` as `Message`s (see ``read(_:count:timeout:)``).
    public static func read<Message: IsletMessage>(
        _ type: Message.Type, from topic: String, count: Int, timeout: Duration = .seconds(30)
    ) async throws -> [Message] {
        try await read(topic, count: count, timeout: timeout).map { try IsletJSON.decode(type, from: $0.value ?? []) }
    }

    /// Every record of `topics` now: read from the start until every partition reported its end
    /// (high watermarks are no record count on tansu: they undercount batches). Throws when that
    /// takes longer than `timeout`.
    public static func readToEnd(_ topics: [String], timeout: Duration = .seconds(30)) async throws -> [KafkaMessage] {
        try await readToEnd(topics, bootstrapServers: try servers(), timeout: timeout)
    }

    /// ``readToEnd(_:timeout:)`` on another broker (an end-to-end stack's own).
    public static func readToEnd(_ topics: [String], bootstrapServers: String, timeout: Duration = .seconds(30)) async throws -> [KafkaMessage] {
        let progress = try await TopicSnapshot.read(topics, bootstrapServers: bootstrapServers, timeout: timeout, logger: testLogger("islet.test.reader")) {
            $0.reachedEnds
        }
        guard !progress.timedOut else {
            throw TestSetupError("could not read \(topics) to their end within \(timeout) (\(progress.atEnd.count) of \(progress.assigned.count) partitions at their end)")
        }
        return progress.messages
    }
}
