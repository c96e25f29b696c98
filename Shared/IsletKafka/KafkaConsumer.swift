import Dispatch
import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// A consumer-group member with at-least-once delivery.
///
/// Offsets are stored only when the caller marks a message processed
/// (``markProcessed(_:)``, which covers every earlier message of that partition too); librdkafka
/// commits stored offsets every `auto.commit.interval.ms`, and synchronously when partitions are
/// revoked, so that the next owner starts right after the last processed message. Assignment and
/// revocation arrive in ``events`` between the messages. ``run()`` drives librdkafka on a thread
/// of its own; when it stops (graceful shutdown, cancellation, ``shutdown()`` or the caller
/// leaving its loop over ``events``), the consumer commits and leaves the group at once.
///
/// ```swift
/// let consumer = try KafkaConsumer(configuration: .init(bootstrapServers: servers, groupID: "g", topics: ["t"]), logger: logger)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await consumer.run() }
///     for await event in consumer.events {
///         if case .message(let message) = event {
///             try await handle(message)
///             consumer.markProcessed(message)
///         }
///     }
/// }
/// ```
public final class KafkaConsumer: Service, Sendable {
    /// The librdkafka handle; replaced when librdkafka declares it unusable (a fatal error).
    private let current: CurrentClient
    private let core: ConsumerCore
    private let configuration: KafkaConsumerConfiguration
    private let properties: [String: String]
    private let logger: Logger

    public init(configuration: KafkaConsumerConfiguration, logger: Logger) throws(KafkaError) {
        let core = ConsumerCore(
            capacity: configuration.bufferCapacity, inGroup: configuration.membership == .group, policy: configuration.health,
            clientID: configuration.clientID, topics: configuration.topics, logger: logger)
        self.core = core
        self.configuration = configuration
        self.logger = logger
        let properties = try configuration.librdkafkaProperties()
        self.properties = properties
        self.current = CurrentClient(try Self.makeClient(properties: properties, core: core, logger: logger))
    }

    /// A handle whose callbacks feed `core` (the poll loop makes its replacements with this too).
    static func makeClient(properties: [String: String], core: ConsumerCore, logger: Logger) throws(KafkaError) -> RDKafkaClient {
        try RDKafkaClient(
            kind: .consumer,
            properties: properties,
            callbacks: RDKafkaCallbacks(
                logger: logger,
                onDelivery: nil,
                onError: { error in core.clientError(error) },
                rebalance: RDKafkaRebalanceHooks(
                    didAssign: { core.didAssign($0) },
                    willRevoke: { core.willRevoke($0, lost: $1) },
                    didRevoke: { core.didRevoke($0) })))
    }

    private var client: RDKafkaClient { current.client }

    /// Assignments, messages and revocations, in order. Iterate it once; leaving the loop stops
    /// the consumer.
    public var events: KafkaConsumerEvents { KafkaConsumerEvents(core: core) }

    /// Only the messages of ``events`` (for callers that keep no per-partition state).
    public var messages: KafkaConsumerMessages { KafkaConsumerMessages(events: events) }

    /// Marks `message`, and every earlier message of its partition, processed: its offset will be
    /// committed. Returns `false` when the partition was revoked since the message was read; the
    /// message will then be delivered to the partition's next owner (at-least-once).
    ///
    /// Kafka commits a position, not a set: marking a message says that all before it in its
    /// partition are done. A loop that keeps several messages of a partition in flight must mark
    /// them in order, only once every earlier one has finished.
    @discardableResult
    public func markProcessed(_ message: KafkaMessage) -> Bool {
        core.mark(message)
    }

    /// Joins the group (subscribes) and drives librdkafka until shutdown, then commits what was
    /// marked and leaves the group. A consumer that is never run never joins its group. A graceful
    /// shutdown of the service group stops it at once.
    public func run() async throws {
        try await run(stoppingOnGracefulShutdown: true)
    }

    /// ``run()``, for a service that must finish its work in flight before the consumer commits
    /// and leaves the group: with `false`, graceful shutdown does not stop the consumer; the
    /// service calls ``shutdown()`` once it is done. Cancellation still stops it.
    public func run(stoppingOnGracefulShutdown: Bool) async throws {
        guard core.start() else {
            throw KafkaError(code: .shutdown, message: "KafkaConsumer.run() may be called once")
        }
        let (core, current, configuration, properties, logger) = (self.core, self.current, self.configuration, self.properties, self.logger)
        let loop: @Sendable () async -> KafkaError? = {
            await DedicatedThread.run(name: "islet-kafka-consumer") { () -> KafkaError? in
                ConsumerPollLoop(configuration: configuration, properties: properties, core: core, current: current, logger: logger).run()
            }
        }
        let probe = Task {
            await core.cluster.probe(policy: configuration.health, while: { !core.stopRequested }) { current.client }
        }
        defer { probe.cancel() }
        let subscribeError: KafkaError? = await withTaskCancellationHandler {
            if stoppingOnGracefulShutdown {
                await withGracefulShutdownHandler(operation: loop, onGracefulShutdown: { self.shutdown() })
            } else {
                await loop()
            }
        } onCancel: {
            self.shutdown()
        }
        if let subscribeError {
            throw subscribeError
        }
        if core.abandonRequested {
            // rd_kafka_destroy joins librdkafka's threads: not on the cooperative pool.
            let client = self.client
            await DedicatedThread.run(name: "islet-kafka-destroy") { client.abandon() }
        }
    }

    /// What the consumer can do now (for `/health`): ready while the cluster answers it and — in a
    /// group — the group gave it its partitions (possibly none); not ready while its handle is
    /// being replaced after a fatal error; `failed` after ``KafkaHealthPolicy/maximumRecoveries``
    /// replacements in a row without a record or an assignment between them (a restart is due).
    public var health: KafkaClientHealth { core.health() }

    /// The `fetch.wait.max.ms` the consumer fetches with now: the configured one, or a longer one
    /// after its broker starved it (``KafkaHealthPolicy/longestFetchWait``).
    public var fetchWait: Duration { .milliseconds(core.fetchWait) }

    /// How many times the handle was replaced after a fatal error.
    public var recoveries: Int { core.recoveries }

    /// Raises a fabricated fatal error in librdkafka (`rd_kafka_test_fatal_error`), as a fenced
    /// member would get one. Tests only.
    public func simulateFatalError(reason: String) {
        let client = self.client
        client.raiseFatalErrorForTesting(reason: reason)
        client.wakeUp()
    }

    /// Tells the caller, synchronously and at once, that partitions were lost — the group gave them
    /// to others without this member's revocation handler (its session expired, it was fenced,
    /// its handle replaced) — before ``KafkaConsumerEvent/partitionsRevoked(_:)`` reaches its
    /// loop, which may be busy with a record: work it holds of theirs must stop now, another
    /// member may be doing it. `handler` runs on the poll thread and must not block. Set it
    /// before ``run()``.
    public func onLoss(_ handler: @escaping @Sendable ([KafkaTopicPartition]) -> Void) {
        core.setLossHandler(handler)
    }

    /// Whether `message`'s partition is still this consumer's, under the assignment it was read
    /// in, and not being revoked: work on it that waits (a read before it is handled) stops when
    /// it is not.
    public func isCurrent(_ message: KafkaMessage) -> Bool {
        !core.stillAssigned([.message(message)]).isEmpty
    }

    /// Lets the caller finish its work on partitions before they are revoked: `handler` is called
    /// with the partitions about to go (by a rebalance, or by the close at shutdown), after their
    /// buffered messages were dropped and before their marked offsets are committed; librdkafka
    /// waits for it, at most `timeout`. What it marks processed meanwhile is committed, so the
    /// partitions' next owner starts after it: work in flight (a push sent, its outcome not yet
    /// written) is finished here instead of done again there. The handler should stop starting
    /// new work on those partitions (messages already on their way to the caller's loop still
    /// arrive) and return once the work under way is finished. Not called when the partitions
    /// were lost (the group moved them on already: there is nothing to commit). Set it before
    /// ``run()``.
    public func onRevocation(timeout: Duration, _ handler: @escaping @Sendable ([KafkaTopicPartition]) async -> Void) {
        core.setRevocationHandler(.init(timeout: timeout, body: handler))
    }

    /// Asks ``run()`` to commit, leave the group and return.
    public func shutdown() {
        core.requestStop()
        client.wakeUp()
    }

    /// The group's committed offsets (the next offset to read) for these partitions.
    public func committedOffsets(for partitions: [KafkaTopicPartition], timeout: Duration = .seconds(10)) async throws
        -> [KafkaTopicPartition: Int64?]
    {
        let client = self.client
        let timeoutMilliseconds = timeout.librdkafkaMilliseconds
        return try await DedicatedThread.run(name: "islet-kafka-committed") {
            // A handle replaced meanwhile (a fatal error) is not asked; the caller may ask again.
            guard let offsets = try client.borrowing({ () throws(KafkaError) in try client.committedOffsets(partitions, timeoutMilliseconds: timeoutMilliseconds) })
            else { throw KafkaError.shutdown("the consumer's handle was destroyed") }
            return offsets
        }
    }

    /// Stops like a process killed with SIGKILL: no commit, no LeaveGroup. The group keeps this
    /// member until its session times out. For tests of crash recovery only; ``run()`` returns.
    public func simulateCrash() {
        core.requestAbandon()
        client.wakeUp()
    }
}
