import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// Refreshes the gauges every second and prints the table every ``interval``.
public struct StatsReporter: Service {
    let store: StatsStore
    let interval: Duration
    let output: @Sendable (String) -> Void

    public init(store: StatsStore, interval: Duration, output: @escaping @Sendable (String) -> Void = { print($0) }) {
        self.store = store
        self.interval = interval
        self.output = output
    }

    public func run() async throws {
        var sincePrint = Duration.zero
        while !Task.isShuttingDownGracefully {
            guard (try? await cancelWhenGracefulShutdown({ try await Task.sleep(for: .seconds(1)) })) != nil else { break }
            store.refreshGauges()
            sincePrint += .seconds(1)
            if sincePrint >= interval {
                sincePrint = .zero
                output(store.snapshot.render())
            }
        }
        store.refreshGauges()
        output(store.snapshot.render())
    }
}
