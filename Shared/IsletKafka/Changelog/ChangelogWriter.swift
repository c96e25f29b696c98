import Foundation
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Writes the changes of a service's per-partition state (``ChangelogSource``) to a compacted
/// topic, in the manner of a Kafka Streams store: every ``interval`` for the partitions this
/// instance owns, and once more for partitions being revoked (``revoked(_:within:)``, from the
/// consumer's revocation handler), so that their next owner reads them when it is assigned them.
///
/// Only partitions owned (or being revoked, within the revocation's time) are written: one writer
/// per partition. A record Kafka did not take is written in the next round. Records are encoded
/// and handed to Kafka in slices of ``slice`` (a round of a million changes is neither a million
/// tasks nor a million records encoded at once).
public final class ChangelogWriter<Source: ChangelogSource>: Service, Sendable {
    /// Hands a record to Kafka and waits for its acknowledgement, only while its partition is
    /// writable (`false`: it is not, nothing was sent); throws when Kafka does not take it.
    public typealias Send = @Sendable (_ key: String, _ value: [UInt8]?, _ partition: Int32) async throws -> Bool

    public let source: Source
    let producer: any MessageSink
    let topic: String
    public let interval: Duration
    /// Records encoded and handed to the producer at once.
    let slice: Int
    /// Whether rounds run one at a time (a revocation's waits for the one under way). Rounds that
    /// may overlap send every change they took, also of a partition revoked meanwhile: a
    /// revocation's round finds nothing left to take of what a periodic round under way took, and
    /// the next owner merges a late record (the source's records must allow that: budgets do).
    let oneAtATime: Bool
    /// What the log and the health check call this changelog ("the budgets' changelog").
    let name: String
    let logger: Logger
    private let recordsWritten: Counter
    private let roundsFailed: Counter
    private let state = Mutex(WriterState())
    private let rounds = AsyncSemaphore(1)

    private struct WriterState {
        /// Partitions being revoked, whose revocation round may still write them.
        var releasing: Set<Int32> = []
        /// Why the last round did not write everything (`nil`: it did).
        var failure: String?
    }

    /// - Parameters:
    ///   - metrics: the prefix of its counters: `<metrics>_records_total`, `<metrics>_failures_total`.
    public init(
        source: Source, producer: any MessageSink, topic: String, interval: Duration, slice: Int, oneAtATime: Bool, name: String,
        metrics: String, logger: Logger
    ) {
        self.source = source
        self.producer = producer
        self.topic = topic
        self.interval = interval
        self.slice = slice
        self.oneAtATime = oneAtATime
        self.name = name
        self.logger = logger
        recordsWritten = Counter(label: "\(metrics)_records_total")
        roundsFailed = Counter(label: "\(metrics)_failures_total")
    }

    public func run() async throws {
        while (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }) != nil {
            await write()
        }
        // The last round is the revocation's, when the service stops (``revoked(_:within:)``).
    }

    /// These partitions are being revoked (from the consumer's revocation handler, once their
    /// work under way finished, before their next owner is assigned them): what changed in them
    /// is written now, at most within `timeout` (with Kafka away the next owner reads the last
    /// round's); after it, nothing more of theirs is handed to Kafka by this instance.
    public func revoked(_ partitions: Set<Int32>, within timeout: Duration) async {
        state.withLock { $0.releasing.formUnion(partitions) }
        source.revoking(partitions)
        await waitAtMost(timeout) { await self.write(partitions: partitions, settleWithin: timeout / 2) }
        state.withLock { $0.releasing.subtract(partitions) }
    }

    /// Why the last round did not write everything (`nil`: it did).
    public var failure: String? { state.withLock { $0.failure } }

    /// The partitions a round may still write: those owned, and those being revoked.
    public var writable: Set<Int32> { source.ownedPartitions.union(state.withLock { $0.releasing }) }

    /// One round, of the partitions owned (or of these, while they are owned or being revoked).
    /// Returns the records written.
    @discardableResult
    public func write(partitions: Set<Int32>? = nil, settleWithin: Duration? = nil) async -> Int {
        if oneAtATime {
            // Cancelled while another round runs: the service is stopping; that round writes.
            guard (try? await rounds.acquire()) != nil else { return 0 }
        }
        defer { if oneAtATime { rounds.release() } }
        let partitions = partitions.map { $0.intersection(writable) } ?? source.ownedPartitions
        guard !partitions.isEmpty else {
            state.withLock { $0.failure = nil }
            return 0
        }
        let taken: (round: Source.Round, changes: [Source.Change])
        do {
            taken = try await source.take(partitions: partitions, settleWithin: settleWithin)
        } catch {
            fail(error.reason)
            return 0
        }
        let now = source.now
        let (failed, changesError) = await writeChanges(taken.changes, writtenAt: now)
        let failedPartitions = Set(failed.map(source.partition(of:)))
        source.takeBack(failed, writable: writable)
        let written = Set(taken.changes.map(source.partition(of:))).subtracting(failedPartitions)
        let (unfinished, finishError) = await source.finish(
            taken.round, partitions: partitions.subtracting(failedPartitions), written: written, writtenAt: now, send: send)
        let count = taken.changes.count - failed.count
        recordsWritten.increment(by: count)
        if let error = finishError ?? changesError {
            roundsFailed.increment()
            fail(source.failure(records: failed.count, partitions: failedPartitions.union(unfinished).sorted(), error: error))
        } else {
            state.withLock { $0.failure = nil }
        }
        return count
    }

    /// Hands a record to Kafka while its partition is writable.
    private var send: Send {
        { [self] key, value, partition in
            guard writable.contains(partition) else { return false }
            _ = try await producer.send(topic: topic, key: key, value: value, headers: [], partition: partition)
            return true
        }
    }

    /// The changes, slice by slice: each encoded, then handed to Kafka at once (one child task
    /// each), only while its partition is still writable. Returns those not written and the last error.
    private func writeChanges(_ changes: [Source.Change], writtenAt: Date) async -> ([Source.Change], (any Error)?) {
        var failed: [Source.Change] = []
        var lastError: (any Error)?
        var next = changes.startIndex
        while next < changes.endIndex {
            let slice = changes[next..<min(next + self.slice, changes.endIndex)]
            next = slice.endIndex
            let writable = self.writable
            var records: [(change: Source.Change, key: String, value: [UInt8]?)] = []
            records.reserveCapacity(slice.count)
            for change in slice {
                // Its partition is another instance's now: handed back (dropped unless this instance
                // owns it again) — unless rounds overlap (above).
                guard !oneAtATime || writable.contains(source.partition(of: change)) else {
                    failed.append(change)
                    continue
                }
                do {
                    let (key, value) = try source.record(of: change, writtenAt: writtenAt)
                    records.append((change, key, value))
                } catch {
                    // Never expected; its partition's round is incomplete all the same.
                    logger.error("\(name): record not encoded", metadata: ["changelog.key": "\(source.name(of: change))", "error": "\(error)"])
                    failed.append(change)
                    lastError = error
                }
            }
            let (notSent, error) = await send(records.map { ($0.key, $0.value, source.partition(of: $0.change)) })
            failed += notSent.map { records[$0].change }
            lastError = error ?? lastError
        }
        return (failed, lastError)
    }

    /// Sends the records at once (the producer's awaited send, one child task each) and waits
    /// for their acknowledgements. Returns the indices of those Kafka did not take, and the last error.
    private func send(_ records: [(key: String, value: [UInt8]?, partition: Int32)]) async -> ([Int], (any Error)?) {
        let (producer, topic) = (self.producer, self.topic)
        return await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for (index, record) in records.enumerated() {
                group.addTask {
                    do {
                        _ = try await producer.send(topic: topic, key: record.key, value: record.value, headers: [], partition: record.partition)
                        return (index, nil)
                    } catch {
                        return (index, error)
                    }
                }
            }
            var failed: ([Int], (any Error)?) = ([], nil)
            for await (index, error) in group where error != nil {
                failed.0.append(index)
                failed.1 = error
            }
            return failed
        }
    }

    private func fail(_ reason: String) {
        state.withLock { $0.failure = reason }
        logger.warning("\(name) round incomplete; the next round writes the rest", metadata: ["reason": "\(reason)"])
    }
}
