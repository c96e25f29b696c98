import Foundation
import IsletKafka
import IsletMessages
import Logging
import Synchronization

/// Reads outcomes again where they are on `islet.push-outcomes.v1`, for the outcomes an activity's
/// memory points at (``ActivityMemory/outcomePositions``). Each position is read on its own (an
/// activity's outcomes are minutes apart in a busy partition: reading from one to the next would
/// read everything between), at most four at once, and at most ``maximumLookups`` lookups run at
/// once in the instance: more are refused (503) rather than queued, so that a flood of lookups
/// costs Kafka connections to nobody.
public final class OutcomeReader: Sendable {
    let source: PositionReader
    let metrics: ContentMetrics
    private let admission = Admission(limit: maximumLookups)

    /// Lookups read at once; the next is refused until one is done.
    public static let maximumLookups = 4

    /// Lookups reading now.
    var lookupsRunning: Int { admission.count }

    public init(
        bootstrapServers: String, topic: String = IsletTopics.pushOutcomes.name, settings: [String: String] = [:], timeout: Duration = .seconds(5),
        metrics: ContentMetrics, logger: Logger
    ) {
        self.metrics = metrics
        source = PositionReader(
            bootstrapServers: bootstrapServers, topic: topic, settings: settings, clientID: "content-service.outcomes", timeout: timeout, logger: logger)
    }

    /// The outcomes at these positions; a position whose record is no longer on the topic (it
    /// expired) is left out.
    public func read(_ positions: [KafkaPosition]) async throws(ActivityLookup.Unavailable) -> [KafkaPosition: PushOutcome] {
        guard !positions.isEmpty else { return [:] }
        guard admission.enter() else {
            metrics.outcomeLookup("busy")
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
                metrics.outcomeLookup("unavailable")
                source.logger.warning("push outcomes could not be read again", metadata: ["kafka.topic": "\(source.topic)", "kafka.position": "\(position)"])
                throw ActivityLookup.Unavailable("the outcomes could not be read from Kafka now: retry in a moment")
            }
        }
        metrics.outcomeLookup("read")
        return found
    }
}
