import IsletKafka
import IsletMessages

/// The properties the topic fuzzer checks: every topic's message type read the way consumers read
/// records (``DeadLetterWriter/check(_:_:)``: ``IsletJSON`` decoding, the schema version, then
/// `validate()`). The first byte picks the type (``check(_:)``), the rest is the record's value.
///
/// For every input the reader returns a verdict without trapping, and:
/// - a message it accepts is written (``IsletJSON/encode(_:)``) to bytes it reads back as the same
///   message, and writing that again gives the same bytes; a message of a topic keyed by activity
///   has a key;
/// - a record it refuses gets a known dead-letter reason and a detail, and the dead letter a
///   consumer writes for it reads back as itself.
public enum MessageChecks {
    /// Checks one input; traps when a property does not hold.
    public static func check(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let value = Array(bytes.dropFirst())
        switch first % 8 {
        case 0: check(TokenRecord.self, value)
        case 1: check(ActivityEvent.self, value)
        case 2: check(PushRequest.self, value)
        case 3: check(PushOutcome.self, value)
        case 4: check(ClickEvent.self, value)
        case 5: check(RejectedClick.self, value)
        case 6: check(DeadLetterRecord.self, value)
        default: check(BroadcastChannelRecord.self, value)
        }
    }

    static func check<Message: IsletMessage>(_ type: Message.Type, _ value: [UInt8]) {
        switch read(type, value) {
        case .success(let message):
            require(rewritten(message) == message, "\(Message.self) read from \(quoted(value)) does not read back as itself once written")
        case .failure(let rejection):
            require(
                rejection.reason.isKnown && !rejection.detail.isEmpty,
                "a refused \(Message.self) has no clear reason: \(rejection.reason) \(rejection.detail.debugDescription)")
            let letter = DeadLetterRecord(
                reason: rejection.reason, detail: rejection.detail, origin: .init(topic: Message.topic.name, partition: 0, offset: 0),
                originalKey: nil, originalValue: value, service: "fuzz", deadLetteredAt: LinkChecks.issued)
            require(rewritten(letter) == letter, "the dead letter of \(quoted(value)) does not read back as itself")
        }
    }

    /// A record's value read as every consumer reads it.
    static func read<Message: IsletMessage>(_ type: Message.Type, _ value: [UInt8]) -> Result<Message, DeadLetterWriter.Rejection> {
        DeadLetterWriter.check(type, KafkaMessage(topic: Message.topic.name, partition: 0, offset: 0, key: nil, value: value))
    }

    /// `message` written as services write it, then read back as consumers read it. Traps unless
    /// it reads back, writes the same bytes again, and has a key where its topic is keyed by activity.
    public static func rewritten<Message: IsletMessage>(_ message: Message) -> Message {
        let bytes: [UInt8]
        do {
            bytes = try IsletJSON.encode(message)
        } catch {
            preconditionFailure("\(Message.self) cannot be written: \(error)")
        }
        let again: Message
        switch read(Message.self, bytes) {
        case .success(let message): again = message
        case .failure(let rejection): preconditionFailure("\(Message.self) as written is refused (\(rejection.detail)): \(quoted(bytes))")
        }
        require((try? IsletJSON.encode(again)) == bytes, "\(Message.self) read back does not write the same bytes: \(quoted(bytes))")
        if Message.topic.coPartitioned {
            require(message.key.map { !$0.isEmpty } == true, "\(Message.self) on \(Message.topic) has no key: \(quoted(bytes))")
        }
        return again
    }
}
