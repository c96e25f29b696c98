import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle

/// The Kafka side of content-service: reads `islet.activity-events.v1` in its consumer group,
/// turns each event into push requests (``ContentEngine``), sends them to
/// `islet.push-requests.v1` and marks the event processed only once they are acknowledged. An
/// event that does not decode, or does not fit its template, goes to the dead-letter topic with
/// the reason and the field; one that is a duplicate or out of order is counted and skipped.
public struct ContentServiceLoop: Service {
    let consumer: KafkaConsumer
    let producer: KafkaProducer
    let deadLetters: DeadLetterWriter
    let engine: ContentEngine
    let requestsTopic: String
    let logger: Logger

    public init(
        consumer: KafkaConsumer, producer: KafkaProducer, deadLetters: DeadLetterWriter, engine: ContentEngine,
        requestsTopic: String = IsletTopics.pushRequests.name, logger: Logger
    ) {
        self.consumer = consumer
        self.producer = producer
        self.deadLetters = deadLetters
        self.engine = engine
        self.requestsTopic = requestsTopic
        self.logger = logger
    }

    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await consumer.run() }
            for try await event in consumer.decoded(as: ActivityEvent.self, deadLetters: deadLetters) {
                guard case .message(let activityEvent, let raw) = event else { continue }
                try await handle(activityEvent, raw)
            }
            consumer.shutdown()
        }
    }

    private func handle(_ event: ActivityEvent, _ raw: KafkaMessage) async throws {
        let decision: ContentEngine.Decision
        do {
            decision = try engine.prepare(event)
        } catch {
            Counter(label: "islet_content_events_total", dimensions: [("result", "refused")]).increment()
            try await deadLetters.deadLetter(raw, reason: .unprocessable, detail: error.description)
            return
        }
        switch decision {
        case .ignore(let why):
            Counter(label: "islet_content_events_total", dimensions: [("result", "ignored")]).increment()
            logger.debug("event ignored", metadata: ["activity.id": "\(event.activityId)", "event.why": "\(why)"])
            consumer.markProcessed(raw)
        case .send(let prepared):
            var backoff = Duration.milliseconds(100)
            while true {
                do {
                    for request in prepared.requests {
                        try await producer.send(request, to: requestsTopic)
                    }
                    break
                } catch {
                    // Kafka refused: the same requests again (same request ids), until it takes them.
                    logger.warning("push requests not persisted; retrying", metadata: ["activity.id": "\(event.activityId)", "error": "\(error)"])
                    try await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, .seconds(5))
                }
            }
            engine.commit(prepared)
            Counter(label: "islet_content_events_total", dimensions: [("result", "sent")]).increment()
            for request in prepared.requests {
                Counter(label: "islet_content_requests_total", dimensions: [("event", request.event.rawValue), ("priority", "\(request.priority)")])
                    .increment()
                Recorder(label: "islet_content_payload_bytes").record(request.payload.utf8.count)
            }
            if !prepared.shrinks.isEmpty { Counter(label: "islet_content_shrinks_total").increment() }
            consumer.markProcessed(raw)
        }
    }
}
