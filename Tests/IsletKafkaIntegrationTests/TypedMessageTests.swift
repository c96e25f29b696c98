import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import Testing

/// The golden files of the message tests: the same examples other teams read in docs/topics.md.
func goldenBytes(_ name: String) throws -> [UInt8] {
    let url = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("IsletMessagesTests/Golden/\(name).json")
    return Array(try Data(contentsOf: url))
}

func golden<Message: IsletMessage>(_ type: Message.Type, _ variant: String? = nil) throws -> Message {
    try IsletJSON.decode(type, from: try goldenBytes(variant.map { "\(Message.self).\($0)" } ?? "\(Message.self)"))
}

/// Sends `messages` to a fresh topic with the typed producer and reads them back with the typed
/// consumer: what arrives must equal what was sent, with the type's key.
func roundTrip<Message: IsletMessage>(_ messages: [Message], servers: String) async throws -> [(Message, KafkaMessage)] {
    let topic = uniqueName("typed-\(Message.self)".lowercased())
    try await createTopic(servers, topic, partitions: 2)
    try await withProducer(try makeProducer(servers)) { producer in
        for message in messages { try await producer.send(message, to: topic) }
    }
    let producer = try makeProducer(servers)
    let consumer = try makeConsumer(servers, group: uniqueName("g"), topics: [topic])
    let deadLetters = DeadLetterWriter(producer: producer, consumer: consumer, service: "test", logger: testLogger, topic: uniqueName("dlq"))
    return try await withRunning([producer, consumer], "reading \(Message.self) back") {
        var received: [(Message, KafkaMessage)] = []
        for try await event in consumer.decoded(as: Message.self, deadLetters: deadLetters) {
            if case .message(let message, let raw) = event {
                received.append((message, raw))
                consumer.markProcessed(raw)
                if received.count == messages.count { break }
            }
        }
        return received
    }
}

@Suite("Typed messages and dead letters against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(4)))
struct TypedMessageTests {
    @Test("every message type goes through a real topic unchanged, under its key")
    func everyMessageType() async throws {
        let servers = try TestBroker.servers()
        func check<Message: IsletMessage>(_ messages: [Message]) async throws {
            let received = try await roundTrip(messages, servers: servers)
            #expect(received.count == messages.count, "\(Message.self)")
            for (message, raw) in received {
                #expect(messages.contains(message), "\(Message.self) arrived changed")
                #expect(raw.keyString == message.key, "\(Message.self) key")
            }
        }
        try await check([golden(TokenRecord.self), golden(TokenRecord.self, "pushToStart"), golden(TokenRecord.self, "invalidated")])
        try await check([golden(ActivityEvent.self), golden(ActivityEvent.self, "pushToStart")])
        try await check([golden(PushRequest.self), golden(PushRequest.self, "pushToStart")])
        try await check([golden(PushOutcome.self), golden(PushOutcome.self, "tokenInvalid"), golden(PushOutcome.self, "coalesced")])
        try await check([golden(ClickEvent.self)])
        try await check([golden(RejectedClick.self)])
        try await check([golden(DeadLetterRecord.self)])
    }

    @Test("records that do not decode or validate go to the dead-letter topic with the reason and origin; the next record is processed")
    func deadLetters() async throws {
        let servers = try TestBroker.servers()
        let topic = uniqueName("events")
        let dlq = uniqueName("dlq")
        try await createTopic(servers, topic, partitions: 1)
        try await createTopic(servers, dlq, partitions: 1)

        let valid = try golden(ActivityEvent.self)
        var later = valid
        later.sequence = 6
        var invalid = valid
        invalid.activityId = "order:42"  // ':' is reserved for push-to-start keys
        var newer = String(decoding: try goldenBytes("ActivityEvent"), as: UTF8.self)
        newer = newer.replacingOccurrences(of: "\"schemaVersion\" : 1", with: "\"schemaVersion\" : 99")

        let inputs: [(String, [UInt8])] = [
            ("valid", try IsletJSON.encode(valid)),
            ("garbage", Array("{not json".utf8)),
            ("newer", Array(newer.utf8)),
            ("invalid", try IsletJSON.encode(invalid)),
            ("later", try IsletJSON.encode(later)),
        ]
        try await withProducer(try makeProducer(servers)) { producer in
            for (_, bytes) in inputs { try await producer.send(topic: topic, key: "order-42", value: bytes) }
        }

        let producer = try makeProducer(servers)
        let consumer = try makeConsumer(servers, group: uniqueName("g"), topics: [topic])
        let writer = DeadLetterWriter(producer: producer, consumer: consumer, service: "content-service", logger: testLogger, topic: dlq)
        let processed = try await withRunning([producer, consumer], "the typed consumer") {
            var processed: [ActivityEvent] = []
            for try await event in consumer.decoded(as: ActivityEvent.self, deadLetters: writer) {
                if case .message(let message, let raw) = event {
                    processed.append(message)
                    consumer.markProcessed(raw)
                    if processed.count == 2 { break }
                }
            }
            return processed
        }
        #expect(processed == [valid, later], "the valid records are processed, in order, around the bad ones")

        // The dead-letter topic holds the three bad records, each with its reason, origin and bytes.
        let reader = try makeConsumer(servers, group: uniqueName("dlq-reader"), topics: [dlq])
        let records = try await withRunning([reader], "reading the dead letters") {
            var records: [DeadLetterRecord] = []
            for await message in reader.messages {
                records.append(try IsletJSON.decode(DeadLetterRecord.self, from: message.value ?? []))
                #expect(message.keyString == "order-42", "a dead letter keeps the original key")
                if records.count == 3 { break }
            }
            return records
        }
        #expect(records.map(\.reason) == [.undecodable, .unsupportedSchemaVersion, .invalid])
        #expect(records.map(\.origin.offset) == [1, 2, 3])
        #expect(records.allSatisfy { $0.origin.topic == topic && $0.origin.partition == 0 && $0.service == "content-service" })
        #expect(records.map(\.originalValue) == [inputs[1].1, inputs[2].1, inputs[3].1])
        #expect(records[2].detail.contains("activityId"), "the detail names the field: \(records[2].detail)")
    }
}
