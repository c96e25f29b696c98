import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle

/// Rebuilds and keeps up the engine's per-activity memory from the service's own output
/// (`islet.push-requests.v1`: sequences, timestamps, states, alerts, the latest content) and the
/// dispatcher's answers (`islet.push-outcomes.v1`), read as a replica of every partition from
/// `since` (the activities' retention). Once every partition was read to its end the first time,
/// `onReady` is called: the event loop may start, and an event already handled before a restart
/// is then recognised as such. A request this process wrote itself (its ``RequestSender/writer``
/// header) is skipped without decoding: the engine committed it when it sent it, and replaying it
/// would change nothing (a memory never moves back to an older timestamp).
public struct ContentMemoryLoader: Service {
    let consumer: KafkaConsumer
    let engine: ContentEngine
    let requestsTopic: String
    let outcomesTopic: String
    let ownWrites: KafkaHeader?
    let onReady: @Sendable () -> Void
    let logger: Logger

    public init(
        consumer: KafkaConsumer, engine: ContentEngine, requestsTopic: String = IsletTopics.pushRequests.name,
        outcomesTopic: String = IsletTopics.pushOutcomes.name, ownWrites: KafkaHeader? = nil, logger: Logger,
        onReady: @escaping @Sendable () -> Void = {}
    ) {
        self.consumer = consumer
        self.ownWrites = ownWrites
        self.engine = engine
        self.requestsTopic = requestsTopic
        self.outcomesTopic = outcomesTopic
        self.logger = logger
        self.onReady = onReady
    }

    public func run() async throws {
        var records = 0
        try await consumer.replay(topics: [requestsTopic, outcomesTopic]) { seconds in
            Gauge(label: "islet_content_memory_rebuild_seconds").record(seconds)
            logger.info(
                "activity memory rebuilt",
                metadata: ["records": "\(records)", "activities": "\(engine.activityCount)", "rebuild.seconds": "\(seconds)"])
            onReady()
        } apply: { message, _ in
            records += 1
            apply(message)
        }
    }

    func apply(_ message: KafkaMessage) {
        do {
            if message.topic == requestsTopic {
                if let ownWrites, message.header(ownWrites.name) == ownWrites {
                    Counter(label: "islet_content_memory_own_requests_skipped_total").increment()
                    return
                }
                engine.replay(
                    try IsletJSON.decode(PushRequest.self, from: message.value ?? []), partition: message.partition,
                    storedAt: message.position)
            } else if message.topic == outcomesTopic {
                engine.record(try IsletJSON.decode(PushOutcome.self, from: message.value ?? []))
            }
        } catch {
            // Written by Islet's own services: a record that does not decode is a bug, not input to guess at.
            Counter(label: "islet_content_memory_invalid_records_total").increment()
            logger.error("record ignored", metadata: ["kafka.topic": "\(message.topic)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }
}
