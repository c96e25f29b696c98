/// The one error type of the Kafka wrapper.
///
/// ``code`` says what went wrong at the wrapper's level; ``librdkafkaCode`` and
/// ``librdkafkaName`` carry librdkafka's own error when there is one, so that its documentation
/// applies. ``isRetriable`` tells a caller whether trying again may succeed; ``isFatal`` that
/// librdkafka declared the client unusable; ``requiresNewClient`` that the client must be recreated
/// (the wrapper's clients do that by themselves).
public struct KafkaError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        public var description: String { name }

        /// A configuration property was unknown or had an invalid value.
        public static let configuration = Code(name: "configuration")
        /// A record was not persisted: the delivery report carried an error.
        public static let delivery = Code(name: "delivery")
        /// The client hit an error it cannot recover from by itself (e.g. the idempotent producer
        /// lost its guarantees); it is being recreated.
        public static let fatal = Code(name: "fatal")
        /// The client was shut down (or never started) before the operation completed.
        public static let shutdown = Code(name: "shutdown")
        /// A produce call was refused (message too large, unknown partition, …).
        public static let produce = Code(name: "produce")
        /// A topic administration request failed.
        public static let admin = Code(name: "admin")
        /// librdkafka reported a problem of the client (a broker down, all brokers down, …); it
        /// keeps retrying by itself unless the error is fatal.
        public static let client = Code(name: "client")
        /// A consumer operation failed (subscribe, commit, poll).
        public static let consumer = Code(name: "consumer")
        /// A blocking call did not complete in time.
        public static let timeout = Code(name: "timeout")
    }

    public var code: Code
    public var message: String
    /// librdkafka's `rd_kafka_resp_err_t` value, when librdkafka reported the error.
    public var librdkafkaCode: Int32?
    /// librdkafka's name for that error (e.g. `_MSG_TIMED_OUT`, `TOPIC_ALREADY_EXISTS`).
    public var librdkafkaName: String?
    public var isRetriable: Bool
    public var isFatal: Bool

    public init(
        code: Code, message: String, librdkafkaCode: Int32? = nil, librdkafkaName: String? = nil,
        isRetriable: Bool = false, isFatal: Bool = false
    ) {
        self.code = code
        self.message = message
        self.librdkafkaCode = librdkafkaCode
        self.librdkafkaName = librdkafkaName
        self.isRetriable = isRetriable
        self.isFatal = isFatal
    }

    /// librdkafka's local queue is full (`queue.buffering.max.messages`): wait briefly and retry.
    public var isQueueFull: Bool { librdkafkaName == "_QUEUE_FULL" }

    /// The client that reported this cannot go on by itself and must be recreated: librdkafka
    /// declared it fatal, or the broker refused the idempotent producer's identity. The second
    /// kind arrives on every delivery report without librdkafka raising a fatal error: after its
    /// requests timed out during a broker stall, librdkafka bumps the producer epoch itself, and a
    /// broker that does not accept that (tansu) answers PRODUCER_FENCED from then on. A new client
    /// asks for a new producer id. ``KafkaProducer`` and ``KafkaConsumer`` recreate themselves.
    public var requiresNewClient: Bool {
        isFatal || librdkafkaName.map(Self.clientIdentityErrors.contains) == true
    }

    /// librdkafka's names of the errors that leave an idempotent producer's identity (producer id,
    /// epoch, sequence numbers) unusable.
    static let clientIdentityErrors: Set<String> = [
        "_FATAL", "_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING", "_INCONSISTENT",
    ]

    /// The producer is being recreated (``requiresNewClient``): nothing is accepted meanwhile. Retriable.
    static func recovering(_ reason: String) -> KafkaError {
        KafkaError(code: .fatal, message: "the producer is being recreated after: \(reason)", isRetriable: true)
    }

    public var description: String {
        var text = "KafkaError.\(code): \(message)"
        if let librdkafkaName { text += " [\(librdkafkaName)]" }
        if isFatal { text += " (fatal)" } else if isRetriable { text += " (retriable)" }
        return text
    }

    static func shutdown(_ what: String) -> KafkaError {
        KafkaError(code: .shutdown, message: what)
    }
}
