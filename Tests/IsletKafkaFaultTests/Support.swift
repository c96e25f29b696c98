import Foundation
import IsletKafka
import IsletTesting
import Logging
import Synchronization
import Testing

/// The fault suites' logger: quiet unless ISLET_TEST_LOG_LEVEL says otherwise.
let logger = testLogger("islet.fault-test", level: .critical)

/// Polls `condition` every 50 ms until it holds; fails the test after `timeout`.
func eventually(
    _ what: String, timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    Issue.record("not within \(timeout): \(what)", sourceLocation: sourceLocation)
}

/// Runs `producer` while `body` runs, then shuts it down; fails if run() throws.
func running<T: Sendable>(_ producer: KafkaProducer, _ body: @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask {
            try await producer.run()
            return nil
        }
        let result = try await body()
        producer.shutdown()
        try await group.waitForAll()
        return result
    }
}

/// Runs `consumer` (its events drained) while `body` runs, then shuts it down; fails if run() throws.
func consuming(_ consumer: KafkaConsumer, _ body: @Sendable () async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await consumer.run() }
        group.addTask { for await _ in consumer.events {} }
        try await body()
        consumer.shutdown()
        try await group.waitForAll()
    }
}

/// Sends `count` records at once and returns each one's verdict (a librdkafka error name, or "delivered").
func sendMany(_ producer: KafkaProducer, topic: String, count: Int) async -> [String] {
    await withTaskGroup(of: String.self) { sends in
        for i in 0..<count {
            sends.addTask {
                do {
                    try await producer.send(topic: topic, key: "k\(i)", value: Array("\(i)".utf8))
                    return "delivered"
                } catch let error as KafkaError {
                    return error.librdkafkaName ?? "\(error.code)"
                } catch {
                    return "\(error)"
                }
            }
        }
        var verdicts: [String] = []
        for await verdict in sends { verdicts.append(verdict) }
        return verdicts
    }
}

/// A value the test's tasks share (a `Mutex` that closures can capture).
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R: Sendable>(_ body: (inout sending Value) -> sending R) -> R { mutex.withLock(body) }
}
