import Foundation

/// Runs blocking work (librdkafka's poll loops, flush, close, admin requests) on an OS thread of
/// its own and awaits the result, so that no thread of Swift's cooperative pool ever waits on
/// librdkafka.
enum DedicatedThread {
    static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                do {
                    continuation.resume(returning: try body())
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            thread.name = name
            thread.start()
        }
    }

    static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: body()) }
            thread.name = name
            thread.start()
        }
    }
}
