import IsletKafka
import IsletMessages
import IsletTokens

/// Where the registry persists its changes: `islet.tokens.v1`. A change counts only once this
/// returns (the record is acknowledged by Kafka).
public protocol TokenRecordPublisher: Sendable {
    /// Persists `record` under its key; returns where it landed (`nil` if the broker did not say).
    /// Throws when the record was not acknowledged.
    func publish(_ record: TokenRecord) async throws -> TokenTable.Position?
    /// Deletes `key` from the compacted topic (a record without a value); throws when it was not acknowledged.
    func tombstone(key: String) async throws -> TokenTable.Position?
}
