import Logging

/// What librdkafka reports through its callbacks, routed to Swift closures.
///
/// Delivery reports, rebalances and errors are served by `rd_kafka_poll`/`rd_kafka_consume_batch_queue`,
/// that is on the client's own poll thread; log lines arrive on librdkafka's internal threads.
struct RDKafkaCallbacks: Sendable {
    var logger: Logger
    /// Called for every delivery report, before the record's own handler (producers only; `nil`
    /// when the record was persisted, otherwise why not).
    var onDelivery: (@Sendable (_ failure: KafkaError?) -> Void)?
    /// librdkafka raised an error (`isFatal` tells whether the client is now unusable).
    var onError: (@Sendable (KafkaError) -> Void)?
    /// Consumer-group rebalances (consumers only).
    var rebalance: RDKafkaRebalanceHooks?
    /// librdkafka's statistics (JSON), every `statistics.interval.ms`, on the poll thread.
    var onStatistics: (@Sendable (String) -> Void)?
    /// Producers only: every topic is partitioned by murmur2 (``RDKafkaPartitioner``) over the
    /// part of a record's key this returns (the part that decides where the record goes); `nil`
    /// keeps librdkafka's default partitioner. Called on the producing thread, for every keyed record.
    var hashedKeyRange: (@Sendable (UnsafeRawBufferPointer) -> Range<Int>)?
}
