import ArgumentParser
import Foundation
import IsletKafka
import IsletMessages
import Logging

/// `islet tail <topic>`: an Islet topic's records, decoded, one line each.
struct Tail: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print an Islet topic's records, decoded, one line each (tokens only as fingerprints).",
        discussion: """
            TOPIC is a topic name or its short name: \(TopicNames.shortNames.map(\.0).joined(separator: ", ")). \
            Reads every partition without joining a consumer group (nothing is committed). By default it \
            starts at the end and follows new records; --since, --offset or --from-beginning choose \
            another start, --no-follow stops once every partition was read to its end.

              islet tail events --since 10m --key order-42
              islet tail outcomes --from-beginning --no-follow --limit 20
            """)

    @Argument(help: "The topic: its name (islet.push-outcomes.v1) or short name (outcomes).")
    var topic: String

    @OptionGroup var kafka: KafkaOptions

    @Option(help: "Start at records written at or after this time: ISO 8601, or an age such as 90s, 10m, 2h, 1d.")
    var since: String?

    @Option(help: "Start at this offset (in every partition read, or those of --partition).")
    var offset: Int64?

    @Option(name: .customLong("partition"), help: "Read only this partition (repeatable).")
    var partitions: [Int32] = []

    @Flag(name: .customLong("from-beginning"), help: "Start at the first record kept.")
    var fromBeginning = false

    @Flag(inversion: .prefixedNo, help: "Keep waiting for new records (default), or stop at the end of every partition.")
    var follow = true

    @Option(help: "Stop after printing this many records.")
    var limit: Int?

    @Option(help: "Only records with this key: an activity id (every app's activity of that id), an app's activity (com.example.food/order-42), or a push-to-start key.")
    var key: String?

    func validate() throws {
        let starts = [since != nil, offset != nil, fromBeginning].filter { $0 }.count
        if starts > 1 { throw ValidationError("choose one start: --since, --offset or --from-beginning") }
        if let offset, offset < 0 { throw ValidationError("--offset must not be negative") }
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
        if partitions.contains(where: { $0 < 0 }) { throw ValidationError("--partition must not be negative") }
        _ = try TopicNames.resolve(topic)
    }

    /// What to read, from the arguments.
    func request(now: Date = Date(), environment: [String: String] = ProcessInfo.processInfo.environment) throws -> TailRequest {
        let topic = try TopicNames.resolve(topic)
        var request = TailRequest(topic: topic, servers: kafka.servers(environment: environment))
        request.security = kafka.security(environment: environment)
        request.partitions = partitions.isEmpty ? nil : partitions
        if let since {
            request.since = try SinceParsing.date(since, now: now)
        } else if let offset {
            request.startOffset = offset
        } else if !fromBeginning {
            request.since = now
        }
        request.follow = follow
        request.limit = limit
        request.key = key
        return request
    }

    mutating func run() async throws {
        let request = try request()
        try await Self.tail(request, logger: kafka.logger) { print($0) }
    }

    /// Reads the topic as `request` says, handing each printed line to `emit`; returns how many.
    @discardableResult
    static func tail(_ request: TailRequest, logger: Logger, emit: @escaping @Sendable (String) -> Void) async throws -> Int {
        let admin = try KafkaAdmin(
            configuration: KafkaAdminConfiguration(bootstrapServers: request.servers, clientID: "islet-cli", settings: request.security), logger: logger)
        guard let count = try await admin.partitionCount(of: request.topic.name) else {
            throw ValidationError("\(request.topic.name) does not exist on \(request.servers)")
        }
        let partitions = request.partitions ?? (0..<Int32(count)).map { $0 }
        if let missing = partitions.first(where: { $0 >= Int32(count) }) {
            throw ValidationError("\(request.topic.name) has \(count) partitions: there is no partition \(missing)")
        }
        var configuration = KafkaConsumerConfiguration.replica(
            bootstrapServers: request.servers, topics: [request.topic.name], partitions: partitions, since: request.since, clientID: "islet-cli",
            settings: request.security)
        if let offset = request.startOffset {
            configuration.replicaStartOffsets = Dictionary(uniqueKeysWithValues: partitions.map { ($0, offset) })
        }
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        return try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask {
                try await consumer.run()
                return nil
            }
            group.addTask {
                defer { consumer.shutdown() }
                return await Self.printEvents(consumer.events, request: request, emit: emit)
            }
            var printed = 0
            while let next = try await group.next() {
                if let next { printed = next }
            }
            return printed
        }
    }

    /// The loop over a consumer's events: filter, format, stop at the limit or (not following) at the end.
    static func printEvents<Events: AsyncSequence<KafkaConsumerEvent, Never>>(
        _ events: Events, request: TailRequest, emit: @Sendable (String) -> Void
    ) async -> Int {
        var printed = 0
        var assigned: Set<KafkaTopicPartition> = []
        var atEnd: Set<KafkaTopicPartition> = []
        for await event in events {
            switch event {
            case .partitionsAssigned(let partitions):
                assigned.formUnion(partitions)
            case .partitionsRevoked(let partitions):
                assigned.subtract(partitions)
            case .message(let message):
                atEnd.remove(message.topicPartition)
                if !request.matches(message.keyString) { continue }
                emit(MessageFormatter.line(for: message, topic: request.topic))
                printed += 1
                if let limit = request.limit, printed >= limit { return printed }
            case .partitionEnd(let partition):
                atEnd.insert(partition)
                if !request.follow, !assigned.isEmpty, atEnd.isSuperset(of: assigned) { return printed }
            }
        }
        return printed
    }
}
