import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// A service's state kept per partition that a ``ChangelogWriter`` writes to a compacted topic:
/// the budgets of apns-dispatcher, the activity memories of content-service.
public protocol ChangelogSource: Sendable {
    /// One key's latest state (a record of the changelog, or a tombstone).
    associatedtype Change: Sendable
    /// What a round took besides its changes, for ``finish(_:partitions:writtenAt:send:)``.
    associatedtype Round: Sendable

    /// The partitions this instance owns: a periodic round writes those.
    var ownedPartitions: Set<Int32> { get }
    /// The time a round's records are stamped with.
    var now: Date { get }
    /// Takes the changes of `partitions` since the last round (they count as written from now
    /// on). Throws ``ChangelogRoundRefused`` when the round cannot begin now.
    func take(partitions: Set<Int32>, settleWithin: Duration?) async throws(ChangelogRoundRefused) -> (round: Round, changes: [Change])
    /// The partition a change is written to.
    func partition(of change: Change) -> Int32
    /// A change's record: its key, and its value (`nil`: a tombstone).
    func record(of change: Change, writtenAt: Date) throws -> (key: String, value: [UInt8]?)
    /// Changes taken that Kafka did not take (or that were not handed to it): the next round's,
    /// where this instance still writes their partition (`writable`).
    func takeBack(_ changes: [Change], writable: Set<Int32>)
    /// After a round's changes: what else it writes for each partition whose changes all reached
    /// Kafka (content-service's checkpoint), through `send`, which hands a record to Kafka only
    /// while its partition is still writable. Returns the partitions whose end was not written.
    func finish(_ round: Round, partitions: Set<Int32>, written: Set<Int32>, writtenAt: Date, send: ChangelogWriter<Self>.Send) async
        -> (failed: Set<Int32>, error: (any Error)?)
    /// These partitions are being revoked: whatever the source remembers of what it wrote for
    /// them is forgotten (another owner may write them next).
    func revoking(_ partitions: Set<Int32>)
    /// What a change is about, for the log (an activity's key, a budget's).
    func name(of change: Change) -> String
    /// Why a round did not write everything, as the health check says it: `records` changes not
    /// written, `partitions` whose round did not end, the last error.
    func failure(records: Int, partitions: [Int32], error: any Error) -> String
}

extension ChangelogSource {
    public func finish(_ round: Round, partitions: Set<Int32>, written: Set<Int32>, writtenAt: Date, send: ChangelogWriter<Self>.Send) async
        -> (failed: Set<Int32>, error: (any Error)?)
    { ([], nil) }
    public func revoking(_ partitions: Set<Int32>) {}
    public func failure(records: Int, partitions: [Int32], error: any Error) -> String {
        "\(records) records not written, partitions \(partitions) not all written: \(error)"
    }
}

