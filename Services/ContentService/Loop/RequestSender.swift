import Foundation
import IsletKafka
import IsletMessages
import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Sends prepared requests to `islet.push-requests.v1` and commits them to the engine's memory;
/// gives the event lanes and the freshness monitor their turns (``ServiceTurns``).
///
/// Requests are handed to librdkafka in order (an activity's, by its lane) and acknowledged in the
/// background (up to `window` events in flight); an event is done once all its requests are. A
/// request Kafka did not take is sent again, the same bytes, in the whole turn before a lane's next
/// event (``repair()``): its event stays open (unmarked) until then, so a crash cannot skip it.
public final class RequestSender: Sendable {
    let producer: any MessageSink
    let engine: ContentEngine
    let topic: String
    let logger: Logger
    /// Names this process as the writer of its push requests (a header on each), so that its
    /// memory replica need not decode them again (``ContentMemoryLoader``): the engine has their
    /// effect already. New with each process: after a restart every request is read back.
    public let writer: KafkaHeader = KafkaHeader(name: RequestSender.writerHeader, value: Array(UUID().uuidString.utf8))
    /// The header naming the content-service process that wrote a push request.
    public static let writerHeader = "islet-writer"
    /// The lanes' turns and the whole turn, in arrival order (a mutex cannot be held across an `await`).
    let turns = ServiceTurns()
    private let owned = Mutex<Set<Int32>>([])
    /// content-service's metrics of every event and request (one set for the service, given by its assembly).
    let metrics: ContentMetrics
    private let inFlight: AsyncSemaphore
    private let failed = Mutex<[(PushRequest, Completion)]>([])

    /// Counts down an event's requests; calls `onDone` at zero. Holds the event's place in the
    /// window until then, or until one of its requests fails: a request waiting to be sent again
    /// (in the whole turn) must not keep a lane that waits for a place from giving that turn.
    final class Completion: Sendable {
        private let state: Mutex<(remaining: Int, holdsPlace: Bool)>
        private let place: AsyncSemaphore
        private let onDone: @Sendable () -> Void
        init(count: Int, place: AsyncSemaphore, onDone: @escaping @Sendable () -> Void) {
            state = Mutex((count, true))
            self.place = place
            self.onDone = onDone
        }
        func one() {
            let (finished, release) = state.withLock { state in
                state.remaining -= 1
                let finished = state.remaining == 0
                let release = finished && state.holdsPlace
                if release { state.holdsPlace = false }
                return (finished, release)
            }
            if release { place.release() }
            if finished { onDone() }
        }
        /// One of its requests failed; it is to be sent again.
        func failed() {
            if state.withLock({ state in defer { state.holdsPlace = false }; return state.holdsPlace }) { place.release() }
        }
    }

    public init(
        producer: any MessageSink, engine: ContentEngine, topic: String = IsletTopics.pushRequests.name, window: Int = 2_000,
        metrics: ContentMetrics, logger: Logger
    ) {
        self.metrics = metrics
        self.producer = producer
        self.engine = engine
        self.topic = topic
        self.inFlight = AsyncSemaphore(window)
        self.logger = logger
    }

    /// The activity-event partitions this instance owns.
    public var ownedPartitions: Set<Int32> { owned.withLock { $0 } }
    /// The event loop was assigned these partitions (a benchmark without a loop says so itself).
    public func own(_ partitions: [Int32]) { owned.withLock { $0.formUnion(partitions) } }
    public func disown(_ partitions: [Int32]) { owned.withLock { $0.subtract(partitions) } }

    /// Runs `body` when no other turn runs: no lane's, no other whole turn.
    func turn<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await turns.whole(body)
    }

    /// Runs `body` in a lane's turn: other lanes' may run at once, the whole turn may not.
    func laneTurn<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await turns.lane(body)
    }

    /// Requests Kafka refused wait to be sent again (``repair()``, in the whole turn).
    var needsRepair: Bool { failed.withLock { !$0.isEmpty } }

    /// Hands the requests to Kafka in order and moves the activity's memory on; `onPersisted` is
    /// called once every one is acknowledged.
    func enqueue(_ prepared: ContentEngine.Prepared, onPersisted: @escaping @Sendable () -> Void) async throws {
        let values = try prepared.requests.map { try IsletJSON.encode($0) }
        try await inFlight.acquire()
        let completion = Completion(count: prepared.requests.count, place: inFlight, onDone: onPersisted)
        // The memory moves on before the first acknowledgement can say where a request is stored.
        engine.commit(prepared)
        for (request, value) in zip(prepared.requests, values) {
            while true {
                do {
                    try producer.produce(topic: topic, key: request.key.map { Array($0.utf8) }, value: value, headers: [writer], partition: nil) { [self] result in
                        switch result {
                        case .success(let report):
                            if let position = report.position { engine.stored(request, at: position) }
                            completion.one()
                        case .failure:
                            self.failed.withLock { $0.append((request, completion)) }
                            completion.failed()
                        }
                    }
                    break
                } catch where error.isQueueFull {
                    await producer.waitForCapacity()
                } catch {
                    failed.withLock { $0.append((request, completion)) }
                    completion.failed()
                    break
                }
            }
            count(request)
        }
    }

    /// Waits, in a turn, until every request handed to Kafka is acknowledged: the engine's memory
    /// then counts nothing Kafka may still lose. `false` when that did not happen within `timeout`
    /// (Kafka slow or unreachable), or a request waits to be sent again (the next turn does that).
    func settle(within timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.milliseconds(1)
        while ContinuousClock.now < deadline {
            if failed.withLock({ !$0.isEmpty }) { return false }
            // A failed request gives its place back after it is listed: listed when the window is idle.
            if inFlight.isIdle { return failed.withLock { $0.isEmpty } }
            guard (try? await Task.sleep(for: pause)) != nil else { return false }
            pause = min(pause * 2, .milliseconds(50))
        }
        return false
    }

    /// Sends again, until Kafka takes them, the requests it refused (in the whole turn: a lane's
    /// next request of the same activity must not pass it).
    func repair() async throws {
        while let (request, completion) = failed.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
            if let position = try await sendUntilAcknowledged(request, activity: request.activityKey ?? request.key ?? "") {
                engine.stored(request, at: position)
            }
            completion.one()
        }
    }

    /// Where the request landed, when Kafka said.
    @discardableResult
    private func sendUntilAcknowledged(_ request: PushRequest, activity: String) async throws -> KafkaPosition? {
        var backoff = Duration.milliseconds(100)
        while true {
            do {
                let report = try await producer.send(request, to: topic, headers: [writer])
                return report.position
            } catch {
                logger.warning("push request not persisted; retrying", metadata: ["activity.key": "\(activity)", "error": "\(error)"])
                try await Task.sleep(for: backoff)
                backoff = min(backoff * 2, .seconds(5))
            }
        }
    }

    private func count(_ request: PushRequest) { metrics.request(request) }
}
