import Synchronization

/// Where a service's records come from, in partition order: a Kafka consumer, or in tests a
/// ``MemoryBus`` topic. A service's loop reads ``events``, handles each record, and marks it
/// processed; ``run()`` serves the source until ``shutdown()``.
public protocol MessageSource: Sendable {
    associatedtype Events: AsyncSequence<KafkaConsumerEvent, Never> & Sendable
    var events: Events { get }
    func run() async throws
    func shutdown()
    /// Marks `message`, and every earlier message of its partition, processed; `false` when its
    /// partition is no longer this source's.
    @discardableResult func markProcessed(_ message: KafkaMessage) -> Bool
}

/// Where a service's records go: a Kafka producer, or in tests a ``MemoryBus``. Returns once the
/// record is persisted.
public protocol MessageSink: Sendable {
    @discardableResult
    func send(topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader], partition: Int32?) async throws -> KafkaDeliveryReport
}

extension KafkaConsumer: MessageSource {}
extension KafkaProducer: MessageSink {}

/// Topics in memory, one partition each: what is sent to the bus, its sources read. For tests of
/// a service's logic without a broker and without waiting: a record is delivered to the sources
/// of its topic as it is sent.
public final class MemoryBus: MessageSink, Sendable {
    private struct State {
        var topics: [String: [KafkaMessage]] = [:]
        var readers: [String: [AsyncStream<KafkaConsumerEvent>.Continuation]] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    @discardableResult
    public func send(topic: String, key: String?, value: [UInt8]?, headers: [KafkaHeader] = [], partition: Int32? = nil) async throws
        -> KafkaDeliveryReport
    {
        // Delivered under the lock: concurrent sends reach every source in offset order.
        let offset = state.withLock { state in
            let message = KafkaMessage(
                topic: topic, partition: 0, offset: Int64(state.topics[topic, default: []].count), key: key.map { Array($0.utf8) }, value: value,
                headers: headers)
            state.topics[topic, default: []].append(message)
            for reader in state.readers[topic] ?? [] { reader.yield(.message(message)) }
            return message.offset
        }
        return KafkaDeliveryReport(topic: topic, partition: 0, offset: offset)
    }

    /// Every record sent to `topic`, in order.
    public func records(_ topic: String) -> [KafkaMessage] { state.withLock { $0.topics[topic] ?? [] } }

    /// A source of `topics` (one consumer with every partition): their records so far, then each
    /// as it is sent, until the source shuts down.
    public func source(_ topics: [String]) -> MemorySource {
        let (events, continuation) = AsyncStream.makeStream(of: KafkaConsumerEvent.self)
        state.withLock { state in
            continuation.yield(.partitionsAssigned(topics.map { KafkaTopicPartition(topic: $0, partition: 0) }))
            for topic in topics {
                for message in state.topics[topic] ?? [] { continuation.yield(.message(message)) }
                state.readers[topic, default: []].append(continuation)
            }
        }
        return MemorySource(events: events, continuation: continuation)
    }
}

/// A ``MemoryBus`` source: remembers what was marked processed.
public final class MemorySource: MessageSource {
    public let events: AsyncStream<KafkaConsumerEvent>
    private let continuation: AsyncStream<KafkaConsumerEvent>.Continuation
    private let stopped = Mutex<[CheckedContinuation<Void, Never>]?>([])
    private let marked = Mutex<[String: Int64]>([:])

    init(events: AsyncStream<KafkaConsumerEvent>, continuation: AsyncStream<KafkaConsumerEvent>.Continuation) {
        self.events = events
        self.continuation = continuation
    }

    /// Returns once the source is shut down.
    public func run() async throws {
        await withCheckedContinuation { waiter in
            let running = stopped.withLock { waiters -> Bool in
                guard waiters != nil else { return false }
                waiters!.append(waiter)
                return true
            }
            if !running { waiter.resume() }
        }
    }

    public func shutdown() {
        continuation.finish()
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

    /// The offset of the last record of `topic` marked processed.
    public func processed(_ topic: String) -> Int64? { marked.withLock { $0[topic] } }
}
