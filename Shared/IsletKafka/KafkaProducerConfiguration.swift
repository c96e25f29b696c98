/// Configuration of a ``KafkaProducer``.
///
/// librdkafka properties keep their own dotted names in ``settings`` so that librdkafka's
/// CONFIGURATION.md applies without translation. The wrapper's guarantees are not negotiable:
/// `enable.idempotence=true` and `acks=all` are always set, and overriding them is a
/// configuration error.
public struct KafkaProducerConfiguration: Sendable {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    public var bootstrapServers: String
    /// `client.id`, shown in broker logs and metrics. Default `islet`.
    public var clientID: String
    /// How long ``KafkaProducer/run()`` waits at shutdown for records still in flight before it
    /// purges them (their senders then get an error: nothing acknowledged is lost). Default 10 s.
    public var flushTimeout: Duration
    /// Any other librdkafka property, by its dotted name. Overrides ``defaultSettings``.
    public var settings: [String: String]
    /// When the producer counts as out of touch with the cluster and how it recovers (``KafkaProducer/health``).
    public var health = KafkaHealthPolicy()
    /// How long ``KafkaProducer/send(topic:key:value:headers:partition:)`` waits for a record's
    /// verdict before it throws a retriable ``KafkaError/Code/timeout``; `nil` (the default): until
    /// librdkafka gives one.
    ///
    /// librdkafka's `message.timeout.ms` bounds that wait only roughly once a record is sent to a
    /// broker that does not answer: the request times out on its own clock and the timeouts are
    /// scanned about once a second (measured on the local broker stopped with SIGSTOP: a 5 s
    /// timeout failed records after up to 6.05 s, a 2 s one after 5.0 s). A service that promises
    /// its callers an answer within a time sets this to that time (and `message.timeout.ms` to the
    /// same, so that librdkafka gives up on the record soon after). The record is not withdrawn at
    /// this timeout: it may still be persisted afterwards, so a caller told to retry may write it twice.
    public var sendTimeout: Duration?

    /// What Islet sets unless ``settings`` says otherwise.
    ///
    /// - `linger.ms=5`: batching is librdkafka's; 5 ms keeps a hop's latency low.
    /// - `message.timeout.ms=30000`: a record not persisted within 30 s fails its `send`, so an
    ///   HTTP caller gets a 503 in bounded time instead of librdkafka's default 5 minutes.
    ///
    /// The partitioner is not a setting: every producer partitions by activity, with the Java
    /// client's murmur2 over the activity id part of the key (``MessageKey/partitionKeyRange(of:)``),
    /// so that a backend producing `order-42` with any Kafka client and Islet writing
    /// `com.example.food/order-42` reach the same partition (co-partitioning depends on it).
    /// librdkafka's own default (CRC32) would not; a `partitioner` setting is ignored.
    public static let defaultSettings: [String: String] = [
        "linger.ms": "5",
        "message.timeout.ms": "30000",
    ]

    static let enforcedSettings: [String: String] = [
        "enable.idempotence": "true",
        "acks": "all",
    ]

    public init(
        bootstrapServers: String,
        clientID: String = "islet",
        flushTimeout: Duration = .seconds(10),
        settings: [String: String] = [:]
    ) {
        self.bootstrapServers = bootstrapServers
        self.clientID = clientID
        self.flushTimeout = flushTimeout
        self.settings = settings
    }

    /// The full property set handed to librdkafka.
    func librdkafkaProperties() throws(KafkaError) -> [String: String] {
        try mergeProperties(
            defaults: Self.defaultSettings, user: settings, enforced: Self.enforcedSettings,
            base: ["bootstrap.servers": bootstrapServers, "client.id": clientID])
    }
}
