import IsletKafka
import IsletTesting
import Logging
import Synchronization
import Testing

/// The one place rebalances are handled (``PartitionHandover``), driven by the in-memory group
/// through each transition: the steps happen in the order the services rely on.
@Suite("Partition hand-over", .timeLimit(.minutes(1)))
struct PartitionHandoverTests {
    final class Steps: Sendable {
        let list = Mutex<[String]>([])
        func add(_ step: String, _ partitions: [KafkaTopicPartition]) {
            list.withLock { $0.append("\(step) \(partitions.map(\.partition).sorted())") }
        }
        func add(_ step: String, _ partitions: Set<Int32>) { list.withLock { $0.append("\(step) \(partitions.sorted())") } }
        var all: [String] { list.withLock { $0 } }
        func take() -> [String] { list.withLock { list in defer { list = [] }; return list } }
    }

    static func handover(_ steps: Steps, restored: Bool = true, finished: Bool = true) -> PartitionHandover {
        PartitionHandover(
            work: "work", finishTimeout: .seconds(1), releaseTimeout: .seconds(1),
            stop: { steps.add("stop", $0) },
            finish: { partitions, _ in
                steps.add("finish", partitions)
                return finished
            },
            release: { partitions, _ in steps.add("release", partitions) },
            lost: { steps.add("lost", $0) },
            restore: { partitions in
                steps.add("restore", partitions)
                return restored
            },
            own: { steps.add("own", $0) },
            forget: { steps.add("forget", $0) })
    }

    /// A member whose loop runs the hand-over's event steps, as the services' loops do.
    static func run(_ member: MemoryGroupMember, _ handover: PartitionHandover) -> Task<Void, any Error> {
        handover.install(on: member, logger: Logger(label: "test"))
        return Task {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await member.run() }
                for await event in member.events {
                    switch event {
                    case .partitionsAssigned(let partitions): _ = try await handover.assigned(partitions)
                    case .partitionsRevoked(let partitions): handover.revoked(partitions)
                    default: continue
                    }
                }
            }
        }
    }

    @Test("assigned: restore, then own; a rebalance: stop, finish, release (in the revocation, before the next owner is assigned), then forget; lost: at once, then forget")
    func order() async throws {
        let bus = MemoryBus(partitions: ["t": 2])
        let steps = Steps()
        let first = bus.member(group: "g", topics: ["t"], rebalance: .cooperative)
        let running = Self.run(first, Self.handover(steps))
        try await eventually("assigned") { steps.all.count == 2 }
        #expect(steps.take() == ["restore [0, 1]", "own [0, 1]"])

        let otherSteps = Steps()
        let second = bus.member(group: "g", topics: ["t"], rebalance: .cooperative)
        let other = Self.run(second, Self.handover(otherSteps))
        try await eventually("moved") { otherSteps.all.count == 2 && steps.all.count == 6 }
        // The rebalance ends with an assignment for every member, empty for the first.
        #expect(steps.take() == ["stop [1]", "finish [1]", "release [1]", "forget [1]", "restore []", "own []"])
        #expect(otherSteps.take() == ["restore [1]", "own [1]"])

        await second.expireSession(rejoining: false)
        try await eventually("lost") { otherSteps.all.count == 2 }
        #expect(otherSteps.take() == ["lost [1]", "forget [1]"])
        first.shutdown()
        second.shutdown()
        _ = try? await running.value
        _ = try? await other.value
    }

    @Test("partitions whose state was not restored (the service stopping) are not owned")
    func notRestored() async throws {
        let bus = MemoryBus(partitions: ["t": 1])
        let steps = Steps()
        let member = bus.member(group: "g", topics: ["t"])
        let running = Self.run(member, Self.handover(steps, restored: false))
        try await eventually("assigned") { !steps.all.isEmpty }
        member.shutdown()
        _ = try? await running.value
        #expect(!steps.all.contains { $0.hasPrefix("own") })
    }

    @Test("work under way that does not finish in time: the release still follows, in the revocation, and then the revoked event")
    func unfinished() async throws {
        let bus = MemoryBus(partitions: ["t": 2])
        let steps = Steps(), otherSteps = Steps()
        let first = bus.member(group: "g", topics: ["t"], rebalance: .cooperative)
        let running = Self.run(first, Self.handover(steps, finished: false))
        try await eventually("assigned") { steps.all.count == 2 }
        _ = steps.take()
        let second = bus.member(group: "g", topics: ["t"], rebalance: .cooperative)
        let other = Self.run(second, Self.handover(otherSteps))
        try await eventually("moved") { otherSteps.all.count == 2 && steps.all.count == 6 }
        // The rebalance ends with an assignment for every member, empty for the first.
        #expect(steps.take() == ["stop [1]", "finish [1]", "release [1]", "forget [1]", "restore []", "own []"])
        first.shutdown()
        second.shutdown()
        _ = try? await running.value
        _ = try? await other.value
    }
}
