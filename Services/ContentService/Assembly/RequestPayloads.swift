import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics

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
    let bootstrapServers: String
    let topic: String
    let settings: [String: String]
    let logger: Logger
    /// How long one read may take (default 30 s).
    let timeout: Duration

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
        logger: Logger
    ) {
        self.bootstrapServers = bootstrapServers
        self.topic = topic
        self.settings = settings
        self.timeout = timeout
        self.logger = logger
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
        Counter(label: "islet_content_payloads_read_total", dimensions: [("result", "read")]).increment(by: answer.found.count)
        Counter(label: "islet_content_payloads_read_total", dimensions: [("result", "lost")]).increment(by: answer.lost.count)
        Counter(label: "islet_content_payloads_read_total", dimensions: [("result", "not_now")]).increment(
            by: chosen.count - answer.found.count - answer.lost.count)
        if !answer.lost.isEmpty {
            logger.error(
                "latest payloads not found where they were stored: those activities are not re-sent or ended until their next request",
                metadata: ["payloads.lost": "\(answer.lost.count)", "example": "\(answer.lost[0].activityKey) at \(answer.lost[0].position)"])
        }
        return answer
    }

    private func scan(_ ranges: [Int32: (first: Int64, last: Int64)], wanted: [KafkaPosition: Set<String>]) async throws -> PositionScan<PushRequest> {
        try await PositionScan.read(
            PushRequest.self, at: Set(wanted.keys), ranges: ranges, topic: topic, bootstrapServers: bootstrapServers, settings: settings,
            clientID: "content-service.payloads", timeout: timeout, logger: logger)
    }
}

/// What one read of records by position found: one replica assigned the partitions of the
/// positions wanted, reading each from its first wanted offset to its last, for at most a timeout.
/// The records are Islet's own JSON messages.
struct PositionScan<Record: IsletMessage>: Sendable {
    /// The records at the wanted positions.
    var records: [KafkaPosition: Record] = [:]
    /// Per partition, the highest offset read (a wanted position at or below it that was not
    /// read is not there).
    var highest: [Int32: Int64] = [:]
    /// Partitions whose reading started over at their first record (the positions were past
    /// their end: the topic was recreated).
    var restarted: Set<Int32> = []

    /// The record at `position` is certainly not on the topic (expired, or the topic recreated).
    func passed(_ position: KafkaPosition) -> Bool {
        restarted.contains(position.partition) || (highest[position.partition].map { $0 >= position.offset } ?? false)
    }

    /// Reads `ranges` (per partition, the first and last offsets wanted) of `topic`, decoding the records at `wanted`.
    static func read(
        _ type: Record.Type, at wanted: Set<KafkaPosition>, ranges: [Int32: (first: Int64, last: Int64)], topic: String, bootstrapServers: String,
        settings: [String: String], clientID: String, timeout: Duration, logger: Logger
    ) async throws -> PositionScan {
        var configuration = KafkaConsumerConfiguration.replica(
            bootstrapServers: bootstrapServers, topics: [topic], partitions: ranges.keys.sorted(), clientID: clientID, settings: settings)
        configuration.replicaStartOffsets = ranges.mapValues(\.first)
        let reader = try KafkaConsumer(configuration: configuration, logger: logger)
        return try await reader.reading(atMost: timeout) { reader in
            var read = PositionScan()
            var open = Set(ranges.keys)
            for await event in reader.events {
                switch event {
                case .message(let message):
                    let partition = message.partition
                    guard let range = ranges[partition], open.contains(partition) else { break }
                    if message.offset < range.first {
                        read.restarted.insert(partition)
                        open.remove(partition)
                    } else {
                        read.highest[partition] = max(read.highest[partition] ?? message.offset, message.offset)
                        let position = message.position
                        if wanted.contains(position), let value = message.value, let record = try? IsletJSON.decode(Record.self, from: value) {
                            read.records[position] = record
                        }
                        if message.offset >= range.last { open.remove(partition) }
                    }
                case .partitionEnd(let partition):
                    open.remove(partition.partition)
                default:
                    break
                }
                if open.isEmpty { return read }
            }
            return read
        }
    }
}
