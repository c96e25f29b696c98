import IsletKafka
import IsletMessages
import Logging
import Metrics

/// Applies the records of `islet.tokens.v1` to a table: a token record or a tombstone. One that
/// is not valid (``TokenTopicRecord``) is logged and counted, never applied.
struct TokenRecordApplier: Sendable {
    let logger: Logger
    let invalid: Counter

    init(service: String, logger: Logger) {
        self.logger = logger
        invalid = Counter(label: "islet_tokens_invalid_records_total", dimensions: [("service", service)])
    }

    func apply(_ message: KafkaMessage, to table: some TokenTopicTable) {
        do {
            switch try TokenTopicRecord(message) {
            case .record(let record, let key): table.apply(record, key: key, partition: message.partition, offset: message.offset)
            case .tombstone(let key): table.remove(key: key, partition: message.partition, offset: message.offset)
            }
        } catch {
            invalid.increment()
            logger.error(
                "token record not applied",
                metadata: ["kafka.partition": "\(message.partition)", "kafka.offset": "\(message.offset)", "error": "\(error)"])
        }
    }
}

/// A record of `islet.tokens.v1` as the tables read it: a token record under its topic key, or a
/// tombstone. Throws for a record without a key, one that does not decode or validate, or one
/// whose key is not its key rule's: the topic is written only by token-registry, so such a record
/// means a bug or a foreign writer, and a table must not guess.
enum TokenTopicRecord {
    case record(TokenRecord, key: String)
    case tombstone(key: String)

    init(_ message: KafkaMessage) throws {
        guard let key = message.keyString else { throw MessageValidationError(field: "key", problem: "a token record needs a key") }
        guard let value = message.value else {
            self = .tombstone(key: key)
            return
        }
        let record = try IsletJSON.decode(TokenRecord.self, from: value)
        try record.validate()
        // An update token written before activity ids were scoped per app has the bare
        // activity id as its key: it is read, and kept under its app's key.
        guard record.key == key || record.legacyKey == key else {
            throw MessageValidationError(field: "key", problem: "the record's key rule gives \(record.key ?? "none"), not \(key)")
        }
        self = .record(record, key: key)
    }
}
