import Foundation
import IsletKafka
import IsletMessages
import Logging
import Synchronization

/// What the backends' HTTP API needs to answer questions about an activity
/// (`GET /v1/activities/{activityId}`, its `/outcomes` and its `/content`): which partition the
/// activity is in, whether this instance owns that partition (only the owner has its memory), and
/// where to read its latest outcomes and its latest payload again (the memory keeps their
/// positions, not the records).
public struct ActivityLookup: Sendable {
    /// Why outcomes could not be read now: the call is answered 503 and may be repeated.
    public struct Unavailable: Error, Sendable {
        public var reason: String
        public init(_ reason: String) { self.reason = reason }
    }

    public typealias ReadOutcomes = @Sendable ([KafkaPosition]) async throws(Unavailable) -> [KafkaPosition: PushOutcome]
    /// The request stored at a position, when it is the one with that id (`nil`: not there).
    public typealias ReadRequest = @Sendable (_ at: KafkaPosition, _ requestId: String) async throws(Unavailable) -> PushRequest?

    /// The partition of `islet.activity-events.v1` an activity id is in; `nil` while the
    /// partition count is not known yet (starting).
    let partition: @Sendable (_ activityId: String) -> Int32?
    /// The partitions this instance owns (and has restored) now: none while its consumer has no
    /// assignment (starting, a rebalance, a broker stall that made it rejoin).
    let owned: @Sendable () -> Set<Int32>
    let readOutcomes: ReadOutcomes
    let readRequest: ReadRequest

    public init(
        partition: @escaping @Sendable (_ activityId: String) -> Int32?, owned: @escaping @Sendable () -> Set<Int32>, readOutcomes: @escaping ReadOutcomes,
        readRequest: @escaping ReadRequest
    ) {
        self.partition = partition
        self.owned = owned
        self.readOutcomes = readOutcomes
        self.readRequest = readRequest
    }

    /// One instance owning everything, with outcomes and requests read from `outcomes` and `requests` (tests).
    public static func everything(
        outcomes: @escaping ReadOutcomes = { _ in [:] }, requests: @escaping ReadRequest = { _, _ in nil }
    ) -> ActivityLookup {
        ActivityLookup(partition: { _ in 0 }, owned: { [0] }, readOutcomes: outcomes, readRequest: requests)
    }
}
