import Foundation
import IsletKafka
import Logging
import Synchronization
import Testing

/// Quick to notice and quick to retry, so that the tests stay short.
private let fastHealth = KafkaHealthPolicy(
    probeInterval: .milliseconds(200), probeTimeout: .milliseconds(500), unreachableAfter: .seconds(1), maximumRecoveries: 3,
    recoveryBackoff: .milliseconds(100), maximumRecoveryBackoff: .milliseconds(400))


@Suite("Kafka clients recover by themselves (librdkafka mock cluster)", .timeLimit(.minutes(3)))
struct RecoveryTests {
    @Test(
        "a produce error that leaves the idempotent producer unusable: the records get their verdicts, the client is recreated, sending works again",
        arguments: [
            KafkaMockCluster.ErrorCode.producerFenced, .outOfOrderSequenceNumber, .unknownProducerId, .invalidProducerEpoch,
        ])
    func identityErrors(_ error: KafkaMockCluster.ErrorCode) async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "recovery-\(error.rawValue)"
        try cluster.createTopic(topic, partitions: 2)
        var configuration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers, settings: ["message.timeout.ms": "10000"])
        configuration.health = fastHealth
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        try await running(producer) {
            try await producer.send(topic: topic, key: "warm", value: [1])
            cluster.injectErrors(Array(repeating: error, count: 3), into: .produce)
            let verdicts = await sendMany(producer, topic: topic, count: 50)
            #expect(verdicts.count == 50, "one verdict per record")
            // Within 30 s a send is acknowledged again, without a restart.
            var delivered = false
            try await eventually("a send acknowledged after \(error)") {
                delivered = (try? await producer.send(topic: topic, key: "after", value: [2])) != nil
                return delivered
            }
            try await eventually("ready again") { producer.health == .ready }
            #expect(producer.health.status != .failed)
        }
    }

    @Test("librdkafka's fatal error: what was in flight fails, run() goes on, the client is recreated once and delivers")
    func fatalErrorRecovers() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("fatal", partitions: 1)
        cluster.setBroker(1, up: false)  // the records stay in flight until the fatal error
        var configuration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers, settings: ["message.timeout.ms": "60000"])
        configuration.health = fastHealth
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        let verdicts = Mutex<[Result<KafkaDeliveryReport, KafkaError>]>([])
        try await running(producer) {
            for i in 0..<20 {
                try producer.produce(topic: "fatal", key: nil, value: [UInt8(i)]) { result in verdicts.withLock { $0.append(result) } }
            }
            producer.simulateFatalError(reason: "sequence gap")
            try await eventually("every record in flight got its verdict") { verdicts.withLock { $0.count } == 20 }
            #expect(verdicts.withLock { $0 }.allSatisfy { if case .failure = $0 { true } else { false } })
            // `recoveries` counts a recreation from its start: wait until the new client is in
            // place, or the send below meets the recreation and is refused as retriable.
            try await eventually("recreated") {
                producer.recoveries == 1 && producer.health.reason?.contains("being recreated") != true
            }
            cluster.setBroker(1, up: true)
            let report = try await producer.send(topic: "fatal", key: "k", value: [1])
            #expect(report.offset != nil)
            try await eventually("ready") { producer.health == .ready }
            #expect(producer.recoveries == 1)
        }
    }

    @Test("health: not ready before run() and while no broker answers, ready again once one does; never failed for an outage")
    func producerHealthFollowsTheCluster() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("health", partitions: 1)
        var configuration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers)
        configuration.health = fastHealth
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        #expect(producer.health.status == .notReady)
        try await running(producer) {
            try await eventually("ready while idle (the probe)") { producer.health == .ready }
            cluster.setBroker(1, up: false)
            try await eventually("not ready while the broker is down") { producer.health.status == .notReady }
            #expect(producer.health.reason?.contains("no answer from Kafka") == true, "\(producer.health)")
            try await Task.sleep(for: .seconds(2))
            #expect(producer.health.status == .notReady, "an outage is not a failure: \(producer.health)")
            cluster.setBroker(1, up: true)
            try await eventually("ready once the broker answers") { producer.health == .ready }
            try await producer.send(topic: "health", key: "k", value: [1])
        }
    }

    @Test("a producer whose recreation keeps failing is reported failed (a restart is due)")
    func failedAfterRepeatedRecoveries() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("failing", partitions: 1)
        var configuration = KafkaProducerConfiguration(bootstrapServers: cluster.bootstrapServers, settings: ["message.timeout.ms": "5000"])
        configuration.health = fastHealth
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        try await running(producer) {
            // Every produce request of every new client is fenced.
            cluster.injectErrors(Array(repeating: .producerFenced, count: 1_000), into: .produce)
            try await eventually("failed") {
                _ = try? await producer.send(topic: "failing", key: "k", value: [1])
                return producer.health.status == .failed
            }
            #expect(producer.recoveries >= fastHealth.maximumRecoveries)
            #expect(producer.health.reason?.contains("PRODUCER_FENCED") == true, "\(producer.health)")
        }
    }

    @Test("a group consumer is ready once the group assigned it partitions and the cluster answers; not ready while it does not")
    func consumerHealthFollowsTheCluster() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("consumed", partitions: 2)
        var configuration = KafkaConsumerConfiguration(bootstrapServers: cluster.bootstrapServers, groupID: "health", topics: ["consumed"])
        configuration.health = fastHealth
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        #expect(consumer.health.status == .notReady)
        try await consuming(consumer) {
            try await eventually("ready once assigned") { consumer.health == .ready }
            cluster.setBroker(1, up: false)
            try await eventually("not ready while the broker is down") { consumer.health.status == .notReady }
            cluster.setBroker(1, up: true)
            try await eventually("ready again") { consumer.health == .ready }
        }
    }

    @Test("a group consumer's fatal error: its partitions are given up (revoked event), a new handle joins the group, what was not marked processed comes again and new records follow")
    func groupConsumerFatalErrorRecovers() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("consumed-fatal", partitions: 2)
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
        var configuration = KafkaConsumerConfiguration(bootstrapServers: cluster.bootstrapServers, groupID: "fatal", topics: ["consumed-fatal"])
        configuration.health = fastHealth
        // The destroyed handle never leaves the group: the new one gets the partitions once the
        // old member's session expired.
        configuration.settings["session.timeout.ms"] = "3000"
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        let seen = Locked<[String]>([])
        let revoked = Locked(0)
        try await running(producer) {
            for i in 0..<10 { try await producer.send(topic: "consumed-fatal", key: "k\(i)", value: Array("before-\(i)".utf8)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await consumer.run() }
                group.addTask {
                    for await event in consumer.events {
                        switch event {
                        case .message(let message):
                            let value = String(decoding: message.value ?? [], as: UTF8.self)
                            let firstSight = seen.withLock { seen in
                                defer { seen.append(value) }
                                return !seen.contains(value)
                            }
                            // before-5 … before-9 are still being worked on when the error comes.
                            if !firstSight || !["before-5", "before-6", "before-7", "before-8", "before-9"].contains(value) {
                                consumer.markProcessed(message)
                            }
                        case .partitionsRevoked: revoked.withLock { $0 += 1 }
                        default: break
                        }
                    }
                }
                try await eventually("the records before the error read") { seen.withLock { $0.count } >= 10 }
                try await eventually("ready") { consumer.health == .ready }
                consumer.simulateFatalError(reason: "fenced")
                try await eventually("recreated") { consumer.recoveries == 1 }
                try await eventually("the caller told its partitions are gone") { revoked.withLock { $0 } >= 1 }
                for i in 0..<5 { try await producer.send(topic: "consumed-fatal", key: "k\(i)", value: Array("after-\(i)".utf8)) }
                try await eventually("the records after the error read") { seen.withLock { $0.filter { $0.hasPrefix("after-") }.count } == 5 }
                try await eventually("ready again") { consumer.health == .ready }
                consumer.shutdown()
                try await group.waitForAll()
            }
        }
        let values = seen.withLock { $0 }
        // Nothing lost; the records not marked processed before the error come again (at least once).
        #expect(Set(values) == Set((0..<10).map { "before-\($0)" } + (0..<5).map { "after-\($0)" }))
        #expect(values.filter { $0.hasPrefix("after-") }.count == 5)
        #expect(consumer.recoveries == 1)
    }

    @Test("a replica's fatal error: a new handle goes on after what the old one read (delivered or still buffered), nothing read twice, nothing missed")
    func replicaFatalErrorRecovers() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("replica-fatal", partitions: 2)
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: cluster.bootstrapServers), logger: logger)
        var configuration = KafkaConsumerConfiguration.replica(bootstrapServers: cluster.bootstrapServers, topics: ["replica-fatal"])
        configuration.health = fastHealth
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        let seen = Locked<[String]>([])
        try await running(producer) {
            for i in 0..<20 { try await producer.send(topic: "replica-fatal", key: "k\(i)", value: Array("before-\(i)".utf8)) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await consumer.run() }
                // Nobody takes the records yet: they wait in the consumer's buffer when the error comes.
                try await eventually("ready") { consumer.health == .ready }
                try await Task.sleep(for: .milliseconds(500))
                consumer.simulateFatalError(reason: "test")
                try await eventually("recreated") { consumer.recoveries == 1 && consumer.health == .ready }
                group.addTask {
                    for await message in consumer.messages { seen.withLock { $0.append(String(decoding: message.value ?? [], as: UTF8.self)) } }
                }
                try await eventually("the records before the error read") { seen.withLock { $0.count } >= 20 }
                for i in 0..<20 { try await producer.send(topic: "replica-fatal", key: "k\(i)", value: Array("after-\(i)".utf8)) }
                try await eventually("the records after the error read") { seen.withLock { $0.count } >= 40 }
                // A second error after records were handed over.
                consumer.simulateFatalError(reason: "test again")
                try await eventually("recreated again") { consumer.recoveries == 2 && consumer.health == .ready }
                for i in 0..<5 { try await producer.send(topic: "replica-fatal", key: "k\(i)", value: Array("last-\(i)".utf8)) }
                try await eventually("the last records read") { seen.withLock { $0.count } >= 45 }
                try await Task.sleep(for: .milliseconds(300))  // anything read twice would arrive meanwhile
                consumer.shutdown()
                try await group.waitForAll()
            }
        }
        let values = seen.withLock { $0 }
        #expect(values.count == 45, "read twice: \(Dictionary(grouping: values) { $0 }.filter { $0.value.count > 1 }.keys.sorted())")
        #expect(Set(values) == Set((0..<20).map { "before-\($0)" } + (0..<20).map { "after-\($0)" } + (0..<5).map { "last-\($0)" }))
    }

    @Test("a replica recovers with each new handle that is assigned its partitions: fatal errors one after another, each recovered from, never make it failed")
    func replicaRecoveriesDoNotAccumulate() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("replica-recoveries", partitions: 1)
        var configuration = KafkaConsumerConfiguration.replica(bootstrapServers: cluster.bootstrapServers, topics: ["replica-recoveries"])
        configuration.health = fastHealth
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        try await consuming(consumer) {
            try await eventually("ready") { consumer.health == .ready }
            for attempt in 1...(fastHealth.maximumRecoveries + 2) {
                consumer.simulateFatalError(reason: "fatal \(attempt)")
                try await eventually("replacement \(attempt) ready") { consumer.recoveries == attempt && consumer.health == .ready }
            }
            #expect(consumer.health.status != .failed, "\(consumer.health)")
        }
    }

    @Test("a consumer whose new handles keep failing is reported failed (a restart is due); run() goes on until stopped")
    func consumerFailedAfterRepeatedRecoveries() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        try cluster.createTopic("consumed-failing", partitions: 1)
        var configuration = KafkaConsumerConfiguration(bootstrapServers: cluster.bootstrapServers, groupID: "failing", topics: ["consumed-failing"])
        configuration.health = fastHealth
        let consumer = try KafkaConsumer(configuration: configuration, logger: logger)
        try await consuming(consumer) {
            try await eventually("ready") { consumer.health == .ready }
            // The broker gone, no new handle gets an assignment: each fails again before it could.
            cluster.setBroker(1, up: false)
            for attempt in 1...fastHealth.maximumRecoveries {
                consumer.simulateFatalError(reason: "fenced \(attempt)")
                try await eventually("replacement \(attempt)") {
                    consumer.recoveries == attempt && consumer.health.reason?.contains("being recreated") != true
                }
            }
            #expect(consumer.health.status == .failed, "\(consumer.health)")
            #expect(consumer.health.reason?.contains("fenced") == true, "\(consumer.health)")
            cluster.setBroker(1, up: true)
        }
    }
}
