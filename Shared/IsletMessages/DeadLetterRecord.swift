import Foundation

/// A record a consumer could not decode or process, on `islet.dlq.v1` under the original key.
///
/// The original bytes are kept (base64) with their origin, so the record can be inspected and
/// replayed once the cause is fixed. Nothing a consumer gives up on disappears silently.
public struct DeadLetterRecord: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.deadLetters

    /// Why the record was dead-lettered.
    public struct Reason: OpenEnum {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The bytes are not a message of the expected type (bad JSON, missing or mistyped field).
        public static let undecodable = Reason(rawValue: "undecodable")
        /// Written with a schema version newer than the consumer knows.
        public static let unsupportedSchemaVersion = Reason(rawValue: "unsupportedSchemaVersion")
        /// Decoded, but breaks a rule of its type (e.g. an `update` without an activity id).
        public static let invalid = Reason(rawValue: "invalid")
        /// Valid, but the consumer cannot act on it (an unknown attributes type, a payload over 4 KB, …).
        public static let unprocessable = Reason(rawValue: "unprocessable")

        public static let knownValues: [Reason] = [.undecodable, .unsupportedSchemaVersion, .invalid, .unprocessable]
    }

    /// Where the original record was.
    public struct Origin: Codable, Sendable, Hashable {
        public var topic: String
        public var partition: Int32
        public var offset: Int64
        /// The original record's timestamp, when it had one.
        public var timestamp: Date?

        public init(topic: String, partition: Int32, offset: Int64, timestamp: Date? = nil) {
            self.topic = topic
            self.partition = partition
            self.offset = offset
            self.timestamp = timestamp
        }
    }

    /// How much of the original value a dead letter keeps: 512 KiB, which base64 turns into about
    /// 700 KB, under Kafka's default 1 MB record limit.
    public static let maximumKeptValueBytes = 512 * 1024

    public var schemaVersion: Int
    public var reason: Reason
    /// A human-readable explanation naming the field or rule at fault.
    public var detail: String
    public var origin: Origin
    /// The original key (UTF-8), also this record's key.
    public var originalKey: String?
    /// The original value, base64; `nil` for a tombstone. At most ``maximumKeptValueBytes`` of it
    /// (see ``originalValueTruncated``), so that a huge poison record still fits a dead letter.
    public var originalValueBase64: String?
    /// The original value's size in bytes; `nil` for a tombstone.
    public var originalValueSize: Int?
    /// Whether ``originalValueBase64`` holds only the first ``maximumKeptValueBytes`` of the value.
    public var originalValueTruncated: Bool
    /// The service (consumer group) that gave up on the record.
    public var service: String
    public var deadLetteredAt: Date

    public init(
        reason: Reason, detail: String, origin: Origin, originalKey: String?, originalValue: [UInt8]?, service: String,
        deadLetteredAt: Date, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.reason = reason
        self.detail = detail
        self.origin = origin
        self.originalKey = originalKey
        self.originalValueBase64 = originalValue.map { Data($0.prefix(Self.maximumKeptValueBytes)).base64EncodedString() }
        self.originalValueSize = originalValue?.count
        self.originalValueTruncated = (originalValue?.count ?? 0) > Self.maximumKeptValueBytes
        self.service = service
        self.deadLetteredAt = deadLetteredAt
    }

    public var key: String? { originalKey }

    /// The original value's bytes (its first ``maximumKeptValueBytes`` when truncated).
    public var originalValue: [UInt8]? {
        originalValueBase64.flatMap { Data(base64Encoded: $0) }.map(Array.init)
    }
}
