import Foundation
import IsletMessages
import ServiceLifecycle
import Synchronization

/// A Kafka cluster in memory, for tests of a service's Kafka side without a broker: topics of
/// partitions (a keyed record goes where Islet's producers put it, ``KafkaPartitioner``), plain
/// sources and replicas that read partitions from a position, and consumer groups whose members
/// are given partitions and have them taken back — by eager or cooperative rebalances, through
/// the member's revocation handler, committing what it marked — as ``KafkaConsumer``'s are. A
/// member can crash (kill -9: nothing committed since its last commit, its partitions stay with
/// it until its session expires) or lose its session while it runs (its loss handler, then it
/// joins again). Produces can be refused or held (``failProduces(_:)``).
///
/// What it does not model: a member that goes on working after the group gave its partitions to
/// another (the bus tells it of the loss first; the deterministic simulation covers that case), a
/// write persisted whose acknowledgement is lost, a full producer queue, and librdkafka's commit
/// interval (with `autoCommit` a mark is committed at once; without, only at a revocation, a
/// close or ``MemoryGroupMember/commit()``).
///
/// Records are handed to readers as they are sent, under the bus's lock: every reader sees a
/// partition in offset order.
public final class MemoryBus: MessageSink, Sendable {
    /// What a produce to a topic meets (``failProduces(_:)``).
    public enum ProduceFault: Sendable {
        /// Refused with this error (nothing written).
        case refuse(KafkaError)
        /// Not answered until ``releaseHeldProduces()``; then written.
        case hold
    }

    /// How a group moves partitions between its members.
    public enum RebalanceProtocol: Sendable {
        /// Every member gives up every partition, then the group assigns them all again, in ranges
        /// over the members in the order they joined: a deterministic stand-in for Kafka's `range`
        /// assignor (Islet's default), which orders members by their random ids. A partition may
        /// come back to the member that had it, or not.
        case eager
        /// Only the partitions that move are given up.
        case cooperative
    }

    struct Reader {
        let continuation: AsyncStream<KafkaConsumerEvent>.Continuation
        /// The next offset to hand over, per partition followed.
        var positions: [KafkaTopicPartition: Int64]
        /// Reports ``KafkaConsumerEvent/partitionEnd(_:)`` when it has read a partition to its end.
        let reportsEnds: Bool
        var endsReported: Set<KafkaTopicPartition> = []
    }

    struct State {
        var partitionCounts: [String: Int]
        var topics: [String: [[KafkaMessage]]] = [:]
        var readers: [UInt64: Reader] = [:]
        var groups: [String: MemoryGroupState] = [:]
        var nextId: UInt64 = 1
        var fault: (@Sendable (String) -> ProduceFault?)?
        /// Produces held, in the order they came: each is written when released.
        var held: [(topic: String, write: @Sendable (inout State) -> Void)] = []

        /// Whether a record of `topic` waits behind a held one (records of a topic are written in order).
        func holds(_ topic: String) -> Bool { held.contains { $0.topic == topic } }

        mutating func partitions(of topic: String) -> [[KafkaMessage]] {
            if let partitions = topics[topic] { return partitions }
            let partitions = Array(repeating: [KafkaMessage](), count: max(1, partitionCounts[topic] ?? 1))
            topics[topic] = partitions
            return partitions
        }

        mutating func takeId() -> UInt64 {
            defer { nextId += 1 }
            return nextId
        }
    }

    let state: Mutex<State>
    let now: @Sendable () -> Date
    /// Delivery reports of ``produce(topic:key:value:headers:partition:onDelivery:)``, called one
    /// after the other, in the order the records were written (as librdkafka's poll thread does).
    private let reports: AsyncStream<@Sendable () -> Void>.Continuation

    /// - Parameters:
    ///   - partitions: the number of partitions of each topic (1 for those not named).
    ///   - now: the records' timestamps.
    public init(partitions: [String: Int] = [:], now: @escaping @Sendable () -> Date = { SystemWallClock().date }) {
        state = Mutex(State(partitionCounts: partitions))
        self.now = now
        let (stream, reports) = AsyncStream.makeStream(of: (@Sendable () -> Void).self)
        self.reports = reports
        Task {
            for await report in stream { report() }
        }
    }

    deinit { reports.finish() }

    // MARK: Producing

    @discardableResult
    public func send(topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil) async throws
        -> KafkaDeliveryReport
    {
        let timestamp = self.timestamp()
        return try await withCheckedThrowingContinuation { continuation in
            let answer = state.withLock { state -> Result<KafkaDeliveryReport, any Error>? in
                switch state.fault?(topic) {
                case .refuse(let error)?: return .failure(error)
                case .hold?: break
                case nil:
                    // Behind a held record of its topic, a record waits too: they are written in order.
                    if !state.holds(topic) {
                        return .success(Self.append(topic, key, value, headers, partition, timestamp, in: &state))
                    }
                }
                state.held.append(
                    (topic, { state in continuation.resume(returning: Self.append(topic, key, value, headers, partition, timestamp, in: &state)) }))
                return nil
            }
            if let answer { continuation.resume(with: answer) }
        }
    }

    public func produce(
        topic: String, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil,
        onDelivery: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) throws(KafkaError) {
        let key = key.map { String(decoding: $0, as: UTF8.self) }
        let timestamp = self.timestamp()
        let reports = self.reports
        // Written now, in the order handed over (behind records held); the verdicts come later,
        // one after the other, as librdkafka's delivery reports do.
        let write: @Sendable (inout State) -> Void = { state in
            let report = Self.append(topic, key, value, headers, partition, timestamp, in: &state)
            reports.yield { onDelivery(.success(report)) }
        }
        state.withLock { state in
            switch state.fault?(topic) {
            case .refuse(let error)?:
                // Reported in its place: after the records of its topic held before it.
                if state.holds(topic) {
                    state.held.append((topic, { _ in reports.yield { onDelivery(.failure(error)) } }))
                } else {
                    reports.yield { onDelivery(.failure(error)) }
                }
            case .hold?:
                state.held.append((topic, write))
            case nil:
                // Behind a held record of its topic, a record waits too: they are written in order.
                if state.holds(topic) { state.held.append((topic, write)) } else { write(&state) }
            }
        }
    }

    /// Always room in memory.
    public func waitForCapacity() async {}

    private func timestamp() -> Int64 { Int64((now().timeIntervalSince1970 * 1_000).rounded(.down)) }

    /// Appends a record and hands it to its readers (under the lock: every reader sees a partition
    /// in offset order).
    private static func append(
        _ topic: String, _ key: String?, _ value: [UInt8]?, _ headers: [KafkaHeader], _ partition: Int32?, _ timestamp: Int64, in state: inout State
    ) -> KafkaDeliveryReport {
        var partitions = state.partitions(of: topic)
        let chosen = partition ?? key.map { KafkaPartitioner.partition(ofKey: $0, partitions: Int32(partitions.count)) } ?? 0
        precondition(partitions.indices.contains(Int(chosen)), "\(topic) has no partition \(chosen)")
        let offset = Int64(partitions[Int(chosen)].count)
        partitions[Int(chosen)].append(
            KafkaMessage(
                topic: topic, partition: chosen, offset: offset, key: key.map { Array($0.utf8) }, value: value,
                timestampMilliseconds: timestamp, headers: headers))
        state.topics[topic] = partitions
        deliver(KafkaTopicPartition(topic: topic, partition: chosen), in: &state)
        return KafkaDeliveryReport(topic: topic, partition: chosen, offset: offset)
    }

    /// From now on, a produce to a topic meets `fault`'s answer for it (`nil`: written). `fault`
    /// runs under the bus's lock: it must not call the bus.
    public func failProduces(_ fault: (@Sendable (_ topic: String) -> ProduceFault?)?) {
        state.withLock { $0.fault = fault }
    }

    /// Produces held by ``ProduceFault/hold`` (and those that came behind them) are written, in the
    /// order they came. A held send waits until then, as a send to a broker that does not answer
    /// does until its timeout.
    public func releaseHeldProduces() {
        state.withLock { state in
            let held = state.held
            state.held = []
            for (_, write) in held { write(&state) }
        }
    }

    /// Produces held now.
    public var heldProduces: Int { state.withLock { $0.held.count } }

    // MARK: Reading

    /// Every record sent to `topic`, partition after partition, each in offset order.
    public func records(_ topic: String) -> [KafkaMessage] {
        state.withLock { $0.topics[topic]?.flatMap { $0 } ?? [] }
    }

    /// The records of one partition of `topic`.
    public func records(_ topic: String, partition: Int32) -> [KafkaMessage] {
        state.withLock { state in
            let partitions = state.topics[topic] ?? []
            return partitions.indices.contains(Int(partition)) ? partitions[Int(partition)] : []
        }
    }

    /// A source of `topics` (one consumer with every partition): their records so far, then each
    /// as it is sent, until the source shuts down.
    public func source(_ topics: [String]) -> MemorySource {
        reader(topics: topics, partitions: nil, since: nil, reportsEnds: false)
    }

    /// A replica of `topics` (``KafkaConsumerConfiguration/Membership/replica``): `partitions` (`nil`:
    /// all) from their start, or from the first record at or after `since`, or from the offset
    /// `startAt` gives; reports each partition's end when it has read it.
    public func replica(
        _ topics: [String], partitions: [Int32]? = nil, since: Date? = nil, startAt: [KafkaTopicPartition: Int64] = [:]
    ) -> MemorySource {
        reader(topics: topics, partitions: partitions, since: since, startAt: startAt, reportsEnds: true)
    }

    /// Where each partition of `topics` ends now (the next offset to be written).
    public func ends(_ topics: [String]) -> [KafkaTopicPartition: Int64] {
        state.withLock { state in
            var ends: [KafkaTopicPartition: Int64] = [:]
            for topic in topics {
                for (partition, records) in state.partitions(of: topic).enumerated() {
                    ends[KafkaTopicPartition(topic: topic, partition: Int32(partition))] = Int64(records.count)
                }
            }
            return ends
        }
    }

    private func reader(
        topics: [String], partitions wanted: [Int32]?, since: Date?, startAt: [KafkaTopicPartition: Int64] = [:], reportsEnds: Bool
    ) -> MemorySource {
        let (events, continuation) = AsyncStream.makeStream(of: KafkaConsumerEvent.self)
        let sinceMilliseconds = since.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded(.down)) }
        let id = state.withLock { state in
            var positions: [KafkaTopicPartition: Int64] = [:]
            for topic in topics {
                let partitions = state.partitions(of: topic)
                for partition in partitions.indices where wanted.map({ $0.contains(Int32(partition)) }) ?? true {
                    let start = sinceMilliseconds.flatMap { since in
                        partitions[partition].first { ($0.timestampMilliseconds ?? 0) >= since }?.offset
                    }
                    let topicPartition = KafkaTopicPartition(topic: topic, partition: Int32(partition))
                    positions[topicPartition] = startAt[topicPartition] ?? (sinceMilliseconds == nil ? 0 : start ?? Int64(partitions[partition].count))
                }
            }
            let id = state.takeId()
            continuation.yield(.partitionsAssigned(positions.keys.sorted(by: Self.order)))
            state.readers[id] = Reader(continuation: continuation, positions: positions, reportsEnds: reportsEnds)
            for partition in positions.keys { Self.deliver(partition, in: &state) }
            return id
        }
        return MemorySource(bus: self, id: id, deliveries: events)
    }

    func stopReader(_ id: UInt64) {
        state.withLock { $0.readers.removeValue(forKey: id) }?.continuation.finish()
    }

    static func order(_ a: KafkaTopicPartition, _ b: KafkaTopicPartition) -> Bool {
        (a.topic, a.partition) < (b.topic, b.partition)
    }

    /// Hands what is new in `partition` to every reader and group member that reads it.
    static func deliver(_ partition: KafkaTopicPartition, in state: inout State) {
        let records = state.topics[partition.topic]?[Int(partition.partition)] ?? []
        for id in state.readers.keys {
            guard var position = state.readers[id]?.positions[partition] else { continue }
            let reader = state.readers[id]!
            let before = position
            while position < records.count {
                reader.continuation.yield(.message(records[Int(position)]))
                position += 1
            }
            state.readers[id]!.positions[partition] = position
            if reader.reportsEnds, position > before || !reader.endsReported.contains(partition) {
                state.readers[id]!.endsReported.insert(partition)
                reader.continuation.yield(.partitionEnd(partition))
            }
        }
        for group in state.groups.keys {
            state.groups[group]!.deliver(partition, records: records)
        }
    }

    // MARK: Groups

    /// A new member of consumer group `group`, reading `topics`. It joins when it runs.
    /// - Parameter autoCommit: whether what it marks is committed at once (as librdkafka's commit
    ///   every `auto.commit.interval.ms`, with no interval); with `false` only at a revocation, a
    ///   graceful close or ``MemoryGroupMember/commit()``.
    public func member(
        group: String, topics: [String], rebalance: RebalanceProtocol = .eager, autoCommit: Bool = true
    ) -> MemoryGroupMember {
        MemoryGroupMember(bus: self, group: group, topics: topics, rebalance: rebalance, autoCommit: autoCommit)
    }

    /// The offset the group committed for a partition (the next to read), if any.
    public func committed(group: String, topic: String, partition: Int32) -> Int64? {
        state.withLock { $0.groups[group]?.committed[KafkaTopicPartition(topic: topic, partition: partition)] }
    }

    /// The partitions each member of `group` is revoking now (its handler runs), by member name.
    public func revoking(group: String) -> [String: [KafkaTopicPartition]] {
        state.withLock { state in
            (state.groups[group]?.members ?? []).filter { !$0.revoking.isEmpty }.reduce(into: [:]) { $0[$1.name] = $1.revoking.sorted(by: Self.order) }
        }
    }

    /// The partitions each member of `group` holds now, by member name.
    public func assignment(group: String) -> [String: [KafkaTopicPartition]] {
        state.withLock { state in
            (state.groups[group]?.members ?? []).reduce(into: [:]) { $0[$1.name] = $1.assigned.keys.sorted(by: Self.order) }
        }
    }
}

/// A ``MemoryBus`` source or replica: remembers what was marked processed.
public final class MemorySource: MessageSource {
    public let events: AsyncStream<KafkaConsumerEvent>
    private let bus: MemoryBus
    private let id: UInt64
    private let stopped = Mutex<[CheckedContinuation<Void, Never>]?>([])
    private let marked = Mutex<[String: Int64]>([:])

    init(bus: MemoryBus, id: UInt64, deliveries: AsyncStream<KafkaConsumerEvent>) {
        self.bus = bus
        self.id = id
        events = deliveries
    }

    /// Returns once the source is shut down — by ``shutdown()``, a graceful shutdown of its service
    /// group, or cancellation, as ``KafkaConsumer/run()``.
    public func run() async throws {
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withCheckedContinuation { waiter in
                    let running = stopped.withLock { waiters -> Bool in
                        guard waiters != nil else { return false }
                        waiters!.append(waiter)
                        return true
                    }
                    if !running { waiter.resume() }
                }
            } onGracefulShutdown: {
                self.shutdown()
            }
        } onCancel: {
            self.shutdown()
        }
    }

    public func shutdown() {
        bus.stopReader(id)
        let waiters = stopped.withLock { waiters in
            defer { waiters = nil }
            return waiters ?? []
        }
        for waiter in waiters { waiter.resume() }
    }

    @discardableResult
    public func markProcessed(_ message: KafkaMessage) -> Bool {
        marked.withLock { $0[message.topic] = max($0[message.topic] ?? -1, message.offset) }
        return true
    }

    /// Always ready: memory does not go away.
    public var health: KafkaClientHealth { .ready }

    /// The offset of the last record of `topic` marked processed.
    public func processed(_ topic: String) -> Int64? { marked.withLock { $0[topic] } }
}
