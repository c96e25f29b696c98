import IsletKafka
import Logging
import ServiceLifecycle

/// A service's process in a test on the in-memory cluster (``MemoryBus``): its services, as its
/// app assembles them, run in a service group from the start; ``stop()`` is SIGTERM, ``kill()``
/// kill -9.
public final class MemoryBusProcess: Sendable {
    /// The process's member of its consumer group.
    public let consumer: MemoryGroupMember
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    public init(consumer: MemoryGroupMember, services: [any Service], logger: Logger) {
        self.consumer = consumer
        group = ServiceGroup(services: services, logger: logger)
        let group = self.group
        running = Task { try await group.run() }
    }

    /// SIGTERM: the services shut down gracefully (what is in flight finishes, then the consumer
    /// commits and leaves); returns once they have.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await running.value
    }

    /// kill -9: the member is dead to the group (nothing committed; the group notices when its
    /// session expires, ``MemoryGroupMember/expireSession()``) and the process stops.
    public func kill() async {
        consumer.crash()
        running.cancel()
        _ = try? await running.value
    }
}
