import Foundation
import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle

/// Keeps the ``TokenTable`` equal to `islet.tokens.v1`: reads every partition of the topic from
/// its start (a replica, not a group member: every registry instance holds the whole table) and
/// goes on applying what any instance writes. Once every partition has been read to its end the
/// first time, the registry is ready (``Registry/markReady()``) and `/health` says so.
///
/// A record that does not decode or validate is logged and counted, never applied: the topic is
/// written only by token-registry, so such a record means a bug or a foreign writer, and the table
/// must not guess.
public struct TokenTableLoader: Service {
    let consumer: KafkaConsumer
    let registry: Registry
    let onReady: @Sendable () -> Void
    let logger: Logger
    private let metrics = RegistryMetrics()

    public init(consumer: KafkaConsumer, registry: Registry, logger: Logger, onReady: @escaping @Sendable () -> Void = {}) {
        self.consumer = consumer
        self.registry = registry
        self.logger = logger
        self.onReady = onReady
    }

    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await consumer.run() }
            try await load()
            // The loop ends when the consumer stops (shutdown); make sure it does.
            consumer.shutdown()
        }
    }

    private func load() async throws {
        let table = registry.table
        let started = ContinuousClock.now
        var assigned: Set<KafkaTopicPartition> = []
        var ended: Set<KafkaTopicPartition> = []
        var ready = false
        for await event in consumer.events {
            switch event {
            case .partitionsAssigned(let partitions):
                assigned.formUnion(partitions)
            case .partitionsRevoked(let partitions):
                assigned.subtract(partitions)
            case .partitionEnd(let partition):
                guard !ready else { continue }
                ended.insert(partition)
                if !assigned.isEmpty, ended.isSuperset(of: assigned) {
                    ready = true
                    let seconds = (ContinuousClock.now - started) / .seconds(1)
                    metrics.rebuilt(seconds: seconds, records: table.count)
                    logger.info("token table rebuilt", metadata: ["tokens.count": "\(table.count)", "rebuild.seconds": "\(seconds)"])
                    registry.markReady()
                    onReady()
                }
            case .message(let message):
                let position = TokenTable.Position(partition: message.partition, offset: message.offset)
                guard let key = message.keyString else {
                    logger.error("token record without a key ignored", metadata: ["kafka.offset": "\(message.offset)"])
                    continue
                }
                guard let value = message.value else {
                    table.remove(key: key, at: position)
                    continue
                }
                do {
                    let record = try IsletJSON.decode(TokenRecord.self, from: value)
                    try record.validate()
                    guard record.key == key else {
                        throw MessageValidationError(field: "key", problem: "the record's key rule gives \(record.key ?? "none"), not \(key)")
                    }
                    table.apply(record, key: key, at: position)
                } catch {
                    logger.error(
                        "token record not applied",
                        metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
                }
                if ready { metrics.tokens(table.count) }
            }
        }
    }
}
