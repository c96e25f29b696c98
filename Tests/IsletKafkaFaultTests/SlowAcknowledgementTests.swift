import Foundation
import IsletKafka
import Logging
import Synchronization
import Testing

/// librdkafka's statistics, the part these tests read.
private struct Statistics: Decodable {
    struct Broker: Decodable {
        let nodeid: Int
        /// How many times the broker's thread woke up.
        let wakeups: Int
    }

    let brokers: [String: Broker]

    /// Wake-ups of the threads of real brokers (not the bootstrap entries, id -1).
    var brokerWakeups: Int { brokers.values.filter { $0.nodeid >= 0 }.map(\.wakeups).reduce(0, +) }
}

/// Whether the librdkafka in use is one scripts/bootstrap.sh built with scripts/patches/ applied
/// (its stamp); a distribution's librdkafka-dev (Debian 13, Ubuntu 24.04) has no such fix.
private let librdkafkaIsPatched = FileManager.default.fileExists(atPath: "/usr/local/share/islet/librdkafka.patches")

@Suite("Producer waiting for slow acknowledgements (librdkafka mock cluster)", .timeLimit(.minutes(1)))
struct SlowAcknowledgementTests {
    /// With idempotence, librdkafka 2.8.0 sends no more to a partition that has 5 or more records in
    /// flight, yet its expired linger scheduled an immediate wake-up: the broker thread then called
    /// poll() without a timeout until the acknowledgement came (scripts/patches/). Measured in
    /// librdkafka's own count of the broker thread's wake-ups.
    @Test(
        "an idempotent producer's broker thread sleeps while a partition waits for its acknowledgements",
        .enabled(if: librdkafkaIsPatched, "librdkafka without scripts/patches/ (the distribution's): its broker thread spins here"))
    func brokerThreadWaitsWithoutSpinning() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "slow-acknowledgements"
        try cluster.createTopic(topic, partitions: 4)
        cluster.setBrokerRoundTripTime(1, .milliseconds(50))
        let latest = Mutex<Statistics?>(nil)
        let producer = try KafkaProducer(
            configuration: .init(bootstrapServers: cluster.bootstrapServers, settings: ["statistics.interval.ms": "100"]),
            logger: Logger(label: "islet.fault-test", factory: { _ in SwiftLogNoOpLogHandler() }),
            statistics: { json in
                if let statistics = try? JSONDecoder().decode(Statistics.self, from: Data(json.utf8)) {
                    latest.withLock { $0 = statistics }
                }
            })
        let records = 200
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            // 10 records every 20 ms for 400 ms over 8 keys in 4 partitions. An acknowledgement
            // takes 50 ms, longer than the linger (5 ms) and the gap between records: records keep
            // waiting behind requests in flight.
            try await withThrowingTaskGroup(of: Void.self) { senders in
                for i in 0..<records {
                    if i > 0, i % 10 == 0 { try await Task.sleep(for: .milliseconds(20)) }
                    senders.addTask { _ = try await producer.send(topic: topic, key: "activity-\(i % 8)", value: Array("\(i)".utf8)) }
                }
                try await senders.waitForAll()
            }
            // One more statistics interval after the last acknowledgement.
            try await Task.sleep(for: .milliseconds(300))
            producer.shutdown()
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - started
        let wakeups = try #require(latest.withLock { $0 }).brokerWakeups
        // Sleeping, the thread wakes for produce requests, acknowledgements, expiring lingers and
        // at least once a second: about 70 times in this run. Spinning (librdkafka 2.8.0 without
        // the patch) it woke 165,000-257,000 times.
        let seconds = elapsed / .seconds(1)
        #expect(Double(wakeups) < 2_000 * max(seconds, 1), "\(wakeups) wake-ups in \(elapsed)")
    }

    /// librdkafka's message.timeout.ms (30 s by default here) bounds the wait for a record already
    /// sent only roughly; a service promises its callers an answer within its send timeout, which
    /// the producer now keeps itself: here a broker whose answers take 3 s.
    @Test("an awaited send with a send timeout throws a retriable timeout when the broker is slower, and the record stays with librdkafka until its verdict")
    func sendTimeoutEndsTheWait() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "send-timeout"
        try cluster.createTopic(topic, partitions: 1)
        var configuration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers)
        configuration.sendTimeout = .milliseconds(400)
        let producer = try KafkaProducer(configuration: configuration, logger: Logger(label: "islet.fault-test", factory: { _ in SwiftLogNoOpLogHandler() }))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            // A first record while the broker answers at once: acknowledged.
            _ = try await producer.send(topic: topic, key: "activity-1", value: Array("fast".utf8))
            cluster.setBrokerRoundTripTime(1, .seconds(3))
            let started = ContinuousClock.now
            await #expect {
                _ = try await producer.send(topic: topic, key: "activity-1", value: Array("slow".utf8))
            } throws: { error in
                let error = error as? KafkaError
                return error?.code == .timeout && error?.isRetriable == true
            }
            let waited = ContinuousClock.now - started
            // The deadline is checked after each poll of the delivery reports (at most 100 ms apart).
            #expect(waited >= .milliseconds(400) && waited < .milliseconds(1_500), "waited \(waited)")
            #expect(producer.inFlightCount == 1)
            // The record was not withdrawn: its verdict still comes, once the broker answers.
            let deadline = ContinuousClock.now + .seconds(20)
            while producer.inFlightCount > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            #expect(producer.inFlightCount == 0)
            producer.shutdown()
            try await group.waitForAll()
        }
    }
}
