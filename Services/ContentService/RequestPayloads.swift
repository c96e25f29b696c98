import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics

/// Reads push requests again where they are on `islet.push-requests.v1`: the activity memory does
/// not keep the latest request's payload once Kafka has it (``ActivityMemory/payloadStoredAt``),
/// and the freshness monitor needs it the few times it re-sends content or ends an activity.
///
/// Positions of one partition close to each other are read by one replica, from the first to the
/// last; each read is bounded in time. A payload that cannot be read (the record expired, the
/// cluster unreachable; a position past the partition's end waits for the timeout) is missing from
/// the answer: the activity stays due, and is tried again on the monitor's next pass.
public struct RequestPayloads: Sendable {
    let bootstrapServers: String
    let topic: String
    let settings: [String: String]
    let logger: Logger
    /// How long one read (one run of nearby positions) may take.
    let timeout: Duration

    /// At most this many positions are read in one call; the others wait for the next pass.
    public static let maximumPerRead = 200
    /// Positions of one partition at most this far apart are read in one run.
    static let maximumGap: Int64 = 1_000

    public init(bootstrapServers: String, topic: String = IsletTopics.pushRequests.name, settings: [String: String] = [:], timeout: Duration = .seconds(5), logger: Logger) {
        self.bootstrapServers = bootstrapServers
        self.topic = topic
        self.settings = settings
        self.timeout = timeout
        self.logger = logger
    }

    /// The payloads of the requests at these positions, by the key they were asked under.
    public func read(_ wanted: [String: StoredPosition]) async -> [String: (position: StoredPosition, payload: String)] {
        let chosen = wanted.sorted { ($0.value.partition, $0.value.offset) < ($1.value.partition, $1.value.offset) }.prefix(Self.maximumPerRead)
        var found: [StoredPosition: String] = [:]
        for run in Self.runs(of: chosen.map(\.value)) {
            do {
                found.merge(try await read(run), uniquingKeysWith: { first, _ in first })
            } catch {
                logger.warning("push requests could not be read again", metadata: ["positions": "\(run)", "error": "\(error)"])
            }
        }
        Counter(label: "islet_content_payloads_read_total", dimensions: [("result", "read")]).increment(by: found.count)
        Counter(label: "islet_content_payloads_read_total", dimensions: [("result", "missing")]).increment(by: chosen.count - found.count)
        var answer: [String: (position: StoredPosition, payload: String)] = [:]
        for (key, position) in chosen { if let payload = found[position] { answer[key] = (position, payload) } }
        return answer
    }

    /// Sorted positions cut into runs: one partition each, no two neighbours more than
    /// ``maximumGap`` apart.
    static func runs(of positions: [StoredPosition]) -> [[StoredPosition]] {
        var runs: [[StoredPosition]] = []
        for position in Set(positions).sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            if let last = runs.last?.last, last.partition == position.partition, position.offset - last.offset <= maximumGap {
                runs[runs.count - 1].append(position)
            } else {
                runs.append([position])
            }
        }
        return runs
    }

    /// Reads one run: from its first offset to its last.
    private func read(_ run: [StoredPosition]) async throws -> [StoredPosition: String] {
        guard let first = run.first, let last = run.last else { return [:] }
        var configuration = KafkaConsumerConfiguration.replica(
            bootstrapServers: bootstrapServers, topics: [topic], partitions: [first.partition], clientID: "content-service.payloads",
            fetchWait: .milliseconds(10), settings: settings)
        configuration.replicaStartOffsets = [first.partition: first.offset]
        let reader = try KafkaConsumer(configuration: configuration, logger: logger)
        let wanted = Set(run.map(\.offset))
        let timeout = self.timeout
        return try await withThrowingTaskGroup(of: [StoredPosition: String]?.self) { group in
            group.addTask {
                try await reader.run()
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                reader.shutdown()
                return nil
            }
            group.addTask {
                var found: [StoredPosition: String] = [:]
                for await event in reader.events {
                    switch event {
                    case .message(let message):
                        // Before the first position: the reader started over at the partition's
                        // first record (the positions were past its end): they are not there.
                        if message.offset < first.offset { return found }
                        if wanted.contains(message.offset), let value = message.value,
                            let request = try? IsletJSON.decode(PushRequest.self, from: value)
                        {
                            found[StoredPosition(partition: message.partition, offset: message.offset)] = request.payload
                        }
                        if message.offset >= last.offset { return found }
                    case .partitionEnd:
                        return found
                    default:
                        break
                    }
                }
                return found
            }
            var result: [StoredPosition: String] = [:]
            while let next = try await group.next() {
                if let found = next {
                    result = found
                    reader.shutdown()
                    group.cancelAll()
                }
            }
            return result
        }
    }
}
