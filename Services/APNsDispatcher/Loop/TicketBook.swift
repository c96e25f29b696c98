import Foundation
import IsletKafka
import IsletMessages
import IsletTokens
import Logging
import ServiceLifecycle
import Synchronization

/// The input records being worked on, by ticket; marks them processed in order when done.
public final class TicketBook: Sendable {
    private struct State {
        var next: UInt64 = 1
        var open: [UInt64: OffsetTracker.Work] = [:]
    }

    private let state = Mutex(State())
    private let tracker = OffsetTracker()
    private let markProcessed: @Sendable (KafkaMessage) -> Void

    public convenience init(consumer: some MessageSource) {
        self.init { consumer.markProcessed($0) }
    }

    /// - Parameter markProcessed: marks a record (and every earlier one of its partition) processed.
    public init(markProcessed: @escaping @Sendable (KafkaMessage) -> Void) {
        self.markProcessed = markProcessed
    }

    /// A ticket for a record read, or `nil` when its partition is being revoked (not worked on).
    func open(_ message: KafkaMessage) -> UInt64? {
        guard let work = tracker.beginWork(message) else { return nil }
        return state.withLock { state in
            let ticket = state.next
            state.next += 1
            state.open[ticket] = work
            return ticket
        }
    }

    /// The request's outcome is persisted: mark what can be marked. A ticket of an assignment of
    /// its partition that is over marks nothing (the partition's records are another track now).
    public func done(_ ticket: UInt64) {
        guard let work = state.withLock({ $0.open.removeValue(forKey: ticket) }) else { return }
        if let release = tracker.complete(work) {
            markProcessed(release)
        }
    }

    func partition(of ticket: UInt64) -> KafkaTopicPartition? {
        state.withLock { $0.open[ticket]?.message.topicPartition }
    }

    func forget(_ tickets: [UInt64]) {
        state.withLock { state in
            for ticket in tickets { state.open[ticket] = nil }
        }
    }

    /// These partitions are no longer this instance's: their records and tickets are forgotten
    /// (a request of theirs still held by the engine, or its answer, marks nothing).
    func revoke(_ partitions: [KafkaTopicPartition]) {
        tracker.revoke(partitions)
        let revoked = Set(partitions)
        state.withLock { state in state.open = state.open.filter { !revoked.contains($0.value.message.topicPartition) } }
    }

    /// No record of these partitions is taken any more (they are about to be revoked).
    func beginRevoking(_ partitions: [KafkaTopicPartition]) {
        tracker.beginRevoking(partitions)
    }

    /// Whether a record of these partitions is taken and not yet done or abandoned.
    func isOpen(in partitions: Set<KafkaTopicPartition>) -> Bool {
        tracker.isOpen(in: partitions)
    }

    /// Before these partitions are revoked: no record of theirs is taken any more, their requests
    /// waiting in the engine (not sent; retries waiting for their backoff too) are dropped, and
    /// those in flight finish (their outcome persisted). Returns whether all finished within `timeout`.
    func finishRevoked(_ partitions: [KafkaTopicPartition], engine: DispatchEngine, timeout: Duration) async -> Bool {
        tracker.beginRevoking(partitions)
        let revoked = Set(partitions)
        return await tracker.waitUntilClosed(partitions, timeout: timeout) {
            // Again on every check: an attempt that failed goes back to waiting for its retry.
            abandon(engine.dropWaiting { ticket in self.partition(of: ticket).map(revoked.contains) ?? false })
        }
    }

    /// These records' work will not be done here (dropped, or not taken after a drain began):
    /// nothing waits for them, nothing is marked past them; the next owner reads them again.
    func abandon(_ tickets: [UInt64]) {
        let works = state.withLock { state in tickets.compactMap { state.open.removeValue(forKey: $0) } }
        for work in works { tracker.abandon(work) }
    }

    /// Records read and not yet released.
    public var openCount: Int { tracker.open }

    /// Tickets taken and not yet done, abandoned or forgotten (for tests: nothing leaks).
    var ticketCount: Int { state.withLock { $0.open.count } }
}
