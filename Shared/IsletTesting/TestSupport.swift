import Foundation
import Logging

/// A test's logger: at `level` (quiet) unless `ISLET_TEST_LOG_LEVEL` names another level.
public func testLogger(_ label: String, level: Logger.Level = .error) -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = ProcessInfo.processInfo.environment["ISLET_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? level
    return logger
}

/// `prefix` and eight random hex digits: a topic, group or id no other test run uses.
public func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
}

/// A push token of `bytes` bytes (hex), the same for the same seed.
public func hexToken(_ seed: Int, bytes: Int = 80) -> String {
    (0..<bytes).map { i in String(format: "%02x", (seed &* 31 &+ i &* 7) & 0xFF) }.joined()
}

/// Runs `operation`; throws ``TimeoutError`` if it takes longer than `limit` (and cancels it).
public func withTimeout<T: Sendable>(
    _ limit: Duration, _ what: String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
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

/// Polls `condition` every 10 ms until it holds (a test waiting for services that run on their
/// own tasks, in memory); throws ``TimeoutError`` after `limit`.
public func eventually(_ what: String, limit: Duration = .seconds(20), _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    throw TimeoutError(what: what, limit: limit)
}

/// Polls `condition` every 100 ms until it gives a value (an integration test waiting for a
/// service that runs on its own); throws ``TimeoutError`` after `limit`.
public func waitForValue<T: Sendable>(
    _ what: String = "the condition", limit: Duration = .seconds(15), _ condition: @Sendable () -> T?
) async throws -> T {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if let value = condition() { return value }
        try await Task.sleep(for: .milliseconds(100))
    }
    throw TimeoutError(what: what, limit: limit)
}
