import Foundation
import IsletKafka
import IsletMessages
import Testing

/// How long the mock cluster's brokers stay down (seconds).
private let downFor = ProcessInfo.processInfo.environment["ISLET_E2E_MOCK_DOWN"].flatMap(Int.init) ?? 12

extension EndToEnd {
    /// The faults tansu cannot show: its process can only be stopped, and killing it loses every
    /// record. librdkafka's mock cluster, in this test's process, serves the services (processes, as
    /// always) over TCP and takes its brokers down and up, moves partition leaders, and refuses
    /// produce requests with the errors that make an idempotent producer unusable.
    @Suite("End to end: the broker goes down, moves and refuses (librdkafka's mock cluster)", .timeLimit(.minutes(10)))
    struct MockBrokerFaultTests {
        static let brokers = 3

        @Test("every broker down and up again, every partition's leader moved, produce refused with OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and PRODUCER_FENCED, under steady load: not ready while down, every service serves again within 30 s of each, the ledger holds")
        func faults() async throws {
            let cluster = try KafkaMockCluster(brokers: Self.brokers)
            for topic in IsletTopics.all {
                try cluster.createTopic(topic.name, partitions: 3, replicationFactor: Self.brokers)
            }
            let stack = try Stack(name: "mock-broker-faults", broker: cluster.bootstrapServers)
            try await stack.start()
            let driver = try Driver(stack: stack)
            let load = SteadyLoad(stack: stack, driver: driver)
            let everyBroker = 1...Self.brokers
            do {
                try await load.prepare()
                let running = Task { await load.run() }
                try await stack.waitForPushes(20, within: .seconds(60))

                // Every partition led by the next broker: leaders move twice in the run.
                let leaders = { @Sendable (shift: Int) in
                    for topic in IsletTopics.all {
                        for partition in 0..<3 {
                            cluster.setPartitionLeader(topic: topic.name, partition: partition, broker: (partition + shift) % Self.brokers + 1)
                        }
                    }
                }
                let refused: [KafkaMockCluster.ErrorCode] = [.outOfOrderSequenceNumber, .unknownProducerId, .producerFenced]
                let faults: [(BrokerFault, Duration)] = [
                    (
                        BrokerFault(
                            name: "down-\(downFor)", outage: true,
                            begin: { for id in everyBroker { cluster.setBroker(id, up: false) } },
                            end: { for id in everyBroker { cluster.setBroker(id, up: true) } }),
                        .seconds(downFor)
                    ),
                    (BrokerFault(name: "leaders", outage: false, begin: { leaders(1) }, end: { leaders(2) }), .seconds(5)),
                    (
                        // Each error three times over: every producer that sends meets some.
                        BrokerFault(
                            name: "refused", outage: false,
                            begin: { cluster.injectErrors(Array(repeating: refused, count: 3).flatMap { $0 }, into: .produce) },
                            end: {}),
                        .seconds(5)
                    ),
                ]
                for (fault, length) in faults {
                    let outcome = try await BrokerStall.run(fault, for: length, stack: stack, driver: driver)
                    outcome.expectRecovered(after: "mock broker \(fault.name)")
                }
                load.stop()
                await running.value
                try await load.verify(label: "mock broker")
            } catch {
                Issue.record(error)
            }
            for id in everyBroker { cluster.setBroker(id, up: true) }
            load.stop()
            await driver.close()
            await stack.stop()
            withExtendedLifetime(cluster) {}
        }
    }
}
