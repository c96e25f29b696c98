import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import Synchronization

/// What the backends' HTTP API needs to answer questions about an activity
/// (`GET /v1/activities/{activityId}` and its `/outcomes`): which partition the activity is in,
/// whether this instance owns that partition (only the owner has its memory), and where to read
/// its latest outcomes again (the memory keeps their positions, not the outcomes).
public struct ActivityLookup: Sendable {
    /// Why outcomes could not be read now: the call is answered 503 and may be repeated.
    public struct Unavailable: Error, Sendable {
        public var reason: String
        public init(_ reason: String) { self.reason = reason }
    }

    public typealias ReadOutcomes = @Sendable ([KafkaPosition]) async throws(Unavailable) -> [KafkaPosition: PushOutcome]

    /// The partition of `islet.activity-events.v1` an activity id is in; `nil` while the
    /// partition count is not known yet (starting).
    let partition: @Sendable (_ activityId: String) -> Int32?
    /// The partitions this instance owns (and has restored) now: none while its consumer has no
    /// assignment (starting, a rebalance, a broker stall that made it rejoin).
    let owned: @Sendable () -> Set<Int32>
    let readOutcomes: ReadOutcomes

    public init(
        partition: @escaping @Sendable (_ activityId: String) -> Int32?, owned: @escaping @Sendable () -> Set<Int32>, readOutcomes: @escaping ReadOutcomes
    ) {
        self.partition = partition
        self.owned = owned
        self.readOutcomes = readOutcomes
    }

    /// One instance owning everything, with outcomes read from `outcomes` (tests).
    public static func everything(outcomes: @escaping ReadOutcomes = { _ in [:] }) -> ActivityLookup {
        ActivityLookup(partition: { _ in 0 }, owned: { [0] }, readOutcomes: outcomes)
    }
}

/// Reads outcomes again where they are on `islet.push-outcomes.v1`, for the outcomes an activity's
/// memory points at (``ActivityMemory/outcomePositions``). Each position is read on its own (an
/// activity's outcomes are minutes apart in a busy partition: reading from one to the next would
/// read everything between), at most four at once, and at most ``maximumLookups`` lookups run at
/// once in the instance: more are refused (503) rather than queued, so that a flood of lookups
/// costs Kafka connections to nobody.
public final class OutcomeReader: Sendable {
    let source: PositionReader
    private let admission = Admission(limit: maximumLookups)

    /// Lookups read at once; the next is refused until one is done.
    public static let maximumLookups = 4

    /// Lookups reading now.
    var lookupsRunning: Int { admission.count }

    public init(
        bootstrapServers: String, topic: String = IsletTopics.pushOutcomes.name, settings: [String: String] = [:], timeout: Duration = .seconds(5),
        logger: Logger
    ) {
        source = PositionReader(
            bootstrapServers: bootstrapServers, topic: topic, settings: settings, clientID: "content-service.outcomes", timeout: timeout, logger: logger)
    }

    /// The outcomes at these positions; a position whose record is no longer on the topic (it
    /// expired) is left out.
    public func read(_ positions: [KafkaPosition]) async throws(ActivityLookup.Unavailable) -> [KafkaPosition: PushOutcome] {
        guard !positions.isEmpty else { return [:] }
        guard admission.enter() else {
            Counter(label: "islet_content_outcome_lookups_total", dimensions: [("result", "busy")]).increment()
            throw ActivityLookup.Unavailable("too many outcome lookups at once in this instance: retry in a moment")
        }
        defer { admission.leave() }
        let source = self.source
        let scans = await withTaskGroup(of: (KafkaPosition, PositionScan<PushOutcome>?).self) { group in
            for position in Set(positions) {
                group.addTask {
                    let scan = try? await PositionScan.read(
                        PushOutcome.self, at: [position], ranges: [position.partition: (position.offset, position.offset)], from: source)
                    return (position, scan)
                }
            }
            var scans: [KafkaPosition: PositionScan<PushOutcome>?] = [:]
            for await (position, scan) in group { scans[position] = scan }
            return scans
        }
        var found: [KafkaPosition: PushOutcome] = [:]
        for (position, scan) in scans {
            if let outcome = scan?.records[position] {
                found[position] = outcome
            } else if scan?.passed(position) != true {
                Counter(label: "islet_content_outcome_lookups_total", dimensions: [("result", "unavailable")]).increment()
                source.logger.warning("push outcomes could not be read again", metadata: ["kafka.topic": "\(source.topic)", "kafka.position": "\(position)"])
                throw ActivityLookup.Unavailable("the outcomes could not be read from Kafka now: retry in a moment")
            }
        }
        Counter(label: "islet_content_outcome_lookups_total", dimensions: [("result", "read")]).increment()
        return found
    }
}
