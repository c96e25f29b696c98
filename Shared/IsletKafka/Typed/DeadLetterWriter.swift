import Foundation
import IsletMessages
import Logging
import Metrics

/// Decodes consumed records as Islet messages, and sends what cannot be decoded or processed to
/// the dead-letter topic (`islet.dlq.v1`) with the reason and its origin: the consumer moves on,
/// and nothing is skipped silently. A dead letter is sent until Kafka persists it — a record is
/// never given up because Kafka refused it for a while — and is marked processed only after that,
/// in its partition's order.
public struct DeadLetterWriter: Sendable {
    public let producer: any MessageSink
    public let consumer: any MessageSource
    /// The service name written into each record (which consumer gave up).
    public let service: String
    /// Where dead letters go. Default `islet.dlq.v1`.
    public let topic: String
    private let logger: Logger
    private let clock: any WallClock
    private let deadLettered: Counter

    /// The longest wait between two tries of a dead-letter send (the first is 100 ms, doubling).
    public static let maximumBackoff: Duration = .seconds(5)

    public init(
        producer: any MessageSink, consumer: any MessageSource, service: String, logger: Logger,
        topic: String = IsletTopics.deadLetters.name, clock: any WallClock = SystemWallClock()
    ) {
        self.producer = producer
        self.consumer = consumer
        self.service = service
        self.topic = topic
        self.logger = logger
        self.clock = clock
        self.deadLettered = Counter(label: "islet_kafka_dead_lettered_total", dimensions: [("service", service)])
    }

    /// The message decoded and validated, or `nil` after it was dead-lettered and marked processed.
    /// A tombstone (null value) is not a message: check `raw.value == nil` before calling.
    public func decode<Message: IsletMessage>(_ type: Message.Type, from raw: KafkaMessage) async throws -> Message? {
        switch Self.check(type, raw) {
        case .success(let message):
            return message
        case .failure(let rejection):
            try await deadLetter(raw, reason: rejection.reason, detail: rejection.detail)
            return nil
        }
    }

    /// Why a record is not a valid message.
    public struct Rejection: Error, Sendable {
        public var reason: DeadLetterRecord.Reason
        public var detail: String
    }

    /// Decodes and validates without suspending (the common path of a consumer loop); a failure
    /// says why, for ``send(_:reason:detail:)``.
    public static func check<Message: IsletMessage>(_ type: Message.Type, _ raw: KafkaMessage) -> Result<Message, Rejection> {
        guard let value = raw.value else {
            return .failure(Rejection(reason: .invalid, detail: "a null value (tombstone) where a \(Message.self) was expected"))
        }
        let message: Message
        do {
            message = try IsletJSON.decode(type, from: value)
        } catch {
            let reason: DeadLetterRecord.Reason =
                if case .unsupportedSchemaVersion = error.kind { .unsupportedSchemaVersion } else { .undecodable }
            return .failure(Rejection(reason: reason, detail: error.description))
        }
        do {
            try message.validate()
        } catch {
            return .failure(Rejection(reason: .invalid, detail: "\(Message.self): \(error.description)"))
        }
        return .success(message)
    }

    /// Sends `raw` to the dead-letter topic and marks it processed once the record is persisted.
    ///
    /// Marking covers every earlier message of the partition too (``KafkaConsumer/markProcessed(_:)``):
    /// call this only once the messages before `raw` are processed, as a loop that handles one
    /// message at a time does.
    public func deadLetter(_ raw: KafkaMessage, reason: DeadLetterRecord.Reason, detail: String) async throws {
        try await send(raw, reason: reason, detail: detail)
        consumer.markProcessed(raw)
    }

    /// Sends `raw` to the dead-letter topic and returns once the record is persisted, without
    /// marking it processed: for loops that keep several messages in flight and mark in order
    /// themselves.
    ///
    /// Tries again, with a backoff up to ``maximumBackoff``, whatever Kafka answers — a broker that
    /// does not answer, a producer being recreated, a topic refusing writes — until the record is
    /// persisted; throws only when the producer shut down or the task was cancelled (the record
    /// then stays unmarked and is read again by the partition's next owner).
    public func send(_ raw: KafkaMessage, reason: DeadLetterRecord.Reason, detail: String) async throws {
        let record = DeadLetterRecord(
            reason: reason, detail: detail,
            origin: .init(
                topic: raw.topic, partition: raw.partition, offset: raw.offset,
                timestamp: raw.timestampMilliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) }),
            originalKey: raw.key.map { String(decoding: $0, as: UTF8.self) }, originalValue: raw.value, service: service,
            deadLetteredAt: clock.date)
        var attempt = 1
        var backoff = Duration.milliseconds(100)
        while true {
            do {
                try await producer.send(record, to: topic)
                break
            } catch {
                if error is CancellationError || (error as? KafkaError)?.code == .shutdown { throw error }
                try Task.checkCancellation()
                logger.warning(
                    "dead-letter send failed, retrying",
                    metadata: ["kafka.error": "\(error)", "kafka.attempt": "\(attempt)", "retry.in": "\(backoff)"])
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, Self.maximumBackoff)
                attempt += 1
            }
        }
        deadLettered.increment()
        logger.warning(
            "record dead-lettered",
            metadata: [
                "kafka.topic": "\(raw.topic)", "kafka.partition": "\(raw.partition)", "kafka.offset": "\(raw.offset)",
                "dlq.reason": "\(reason)", "dlq.detail": "\(detail)",
            ])
    }
}
