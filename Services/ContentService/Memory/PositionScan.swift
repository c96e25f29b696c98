import IsletKafka
import IsletMessages
import Logging

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

    /// Reads `ranges` (per partition, the first and last offsets wanted) of the topic `source`
    /// reads, decoding the records at `wanted`.
    static func read(
        _ type: Record.Type, at wanted: Set<KafkaPosition>, ranges: [Int32: (first: Int64, last: Int64)], from source: PositionReader
    ) async throws -> PositionScan {
        var configuration = KafkaConsumerConfiguration.replica(
            bootstrapServers: source.bootstrapServers, topics: [source.topic], partitions: ranges.keys.sorted(), clientID: source.clientID,
            settings: source.settings)
        configuration.replicaStartOffsets = ranges.mapValues(\.first)
        let reader = try KafkaConsumer(configuration: configuration, logger: source.logger)
        return try await reader.reading(atMost: source.timeout) { reader in
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
