import IsletRuntime
import Logging
import ServiceLifecycle
import Synchronization
import Testing

/// A service that waits for graceful shutdown and records when it stopped.
struct RecordingService: Service {
    let name: String
    let stops: Stops

    final class Stops: Sendable {
        private let order = Mutex<[String]>([])
        func append(_ name: String) { order.withLock { $0.append(name) } }
        var all: [String] { order.withLock { $0 } }
    }

    func run() async throws {
        try? await gracefulShutdown()
        stops.append(name)
    }
}

@Suite("Graceful shutdown")
struct ShutdownTests {
    @Test("services stop in reverse order of the list, /health turns to stopping first")
    func reverseOrder() async throws {
        let settings = try ServiceSettings(from: .variables(["ISLET_KAFKA_BOOTSTRAP": "k:1"]), serviceName: "s", defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: Logger(label: "test"))
        let stops = RecordingService.Stops()
        let group = runtime.makeServiceGroup([
            RecordingService(name: "producer", stops: stops),
            RecordingService(name: "consumer", stops: stops),
            RecordingService(name: "http", stops: stops),
        ])
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // Every service has started (the recording services report ready as they start).
            while runtime.health.report().status != .ready { await Task.yield() }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(stops.all == ["http", "consumer", "producer"])
        #expect(runtime.health.report().status == .stopping)
    }
}
