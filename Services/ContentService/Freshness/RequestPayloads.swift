import Foundation
import IsletKafka
import IsletMessages
import Logging

/// Reads push requests again where they are on `islet.push-requests.v1`: the activity memory does
/// not keep the latest request's payload once Kafka has it (``ActivityMemory/payloadStoredAt``),
/// and the freshness monitor needs it the few times it re-sends content or ends an activity.
///
/// One read serves a whole monitor pass: one replica, assigned every partition with a position
/// wanted, from the first wanted offset of each to its last, for at most ``timeout`` — so a pass
/// costs one read however many activities are stale, and the work is proportional to what the
/// partitions hold between the positions. A payload is taken only from the request it was stored
/// as (same request id). The answer says what was found, what is certainly not there (a later
/// offset was read and it was not among them: the record expired, or the topic was recreated),
/// and leaves out what could not be read now (the cluster unreachable, the time up): those stay
/// due and are asked for again on the next pass.
public struct RequestPayloads: Sendable {
    /// The topic of push requests; one read takes at most its timeout (default 30 s).
    let source: PositionReader
    let metrics: ContentMetrics
    var logger: Logger { source.logger }

    /// At most this many payloads are read in one pass, those of the activities due longest first;
    /// the others wait for the next pass.
    public static let maximumPerRead = 2_000

    public struct Answer: Sendable {
        /// Payloads found, by activity.
        public var found: [String: (position: KafkaPosition, request: PushRequest)] = [:]
        /// Not where they were stored.
        public var lost: [ContentEngine.PayloadToRead] = []
    }

    public init(
        bootstrapServers: String, topic: String = IsletTopics.pushRequests.name, settings: [String: String] = [:], timeout: Duration = .seconds(30),
        metrics: ContentMetrics, logger: Logger
    ) {
        self.metrics = metrics
        source = PositionReader(
            bootstrapServers: bootstrapServers, topic: topic, settings: settings, clientID: "content-service.payloads", timeout: timeout, logger: logger)
    }

    /// The payloads of these requests (in the order given, at most ``maximumPerRead``).
    public func read(_ wanted: [ContentEngine.PayloadToRead]) async -> Answer {
        let chosen = Array(wanted.prefix(Self.maximumPerRead))
        guard !chosen.isEmpty else { return Answer() }
        // Partition → offset → the request ids stored there (one, unless two activities share a request).
        var byPosition: [KafkaPosition: Set<String>] = [:]
        for item in chosen { byPosition[item.position, default: []].insert(item.requestId) }
        let ranges = Dictionary(grouping: byPosition.keys, by: \.partition).mapValues { positions in
            (first: positions.map(\.offset).min()!, last: positions.map(\.offset).max()!)
        }
        var read = PositionScan<PushRequest>()
        do {
            read = try await scan(ranges, wanted: byPosition)
        } catch {
            logger.warning("push requests could not be read again", metadata: ["kafka.partitions": "\(ranges.keys.sorted())", "error": "\(error)"])
        }
        var answer = Answer()
        for item in chosen {
            if let request = read.records[item.position], request.requestId == item.requestId {
                answer.found[item.activityKey] = (item.position, request)
            } else if read.passed(item.position) {
                answer.lost.append(item)
            }
        }
        metrics.payloadsRead("read", answer.found.count)
        metrics.payloadsRead("lost", answer.lost.count)
        metrics.payloadsRead("not_now", chosen.count - answer.found.count - answer.lost.count)
        if !answer.lost.isEmpty {
            logger.error(
                "latest payloads not found where they were stored: those activities are not re-sent or ended until their next request",
                metadata: ["payloads.lost": "\(answer.lost.count)", "example": "\(answer.lost[0].activityKey) at \(answer.lost[0].position)"])
        }
        return answer
    }

    private func scan(_ ranges: [Int32: (first: Int64, last: Int64)], wanted: [KafkaPosition: Set<String>]) async throws -> PositionScan<PushRequest> {
        try await PositionScan.read(PushRequest.self, at: Set(wanted.keys), ranges: ranges, from: source)
    }
}
