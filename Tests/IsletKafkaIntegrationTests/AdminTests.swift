import IsletKafka
import IsletMessages
import IsletTesting
import Testing

@Suite("Topic administration against the broker", .enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(2)))
struct AdminTests {
    @Test("creating topics is idempotent and keeps the partition count; tokens is compacted")
    func createIdempotently() async throws {
        let servers = try TestBroker.servers()
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: servers), logger: testLogger)
        let name = uniqueName("admin")
        let compacted = KafkaAdmin.TopicSpec(IsletTopics.tokens, partitions: 4)
        let spec = KafkaAdmin.TopicSpec(name: name, partitions: 4, configs: compacted.configs)

        #expect(try await admin.createTopics([spec]) == [name: .created])
        #expect(try await admin.createTopics([spec]) == [name: .alreadyExisted(partitions: 4)])
        #expect(try await admin.partitionCount(of: name) == 4)
        #expect(try await admin.partitionCount(of: uniqueName("absent")) == nil)
        let configs = try await admin.configs(of: name)
        #expect(configs["cleanup.policy"] == "compact")
    }

    @Test("Islet's topics are created with their retention, and a second run changes nothing")
    func isletTopics() async throws {
        let servers = try TestBroker.servers()
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: servers), logger: testLogger)
        // The broker is shared by the test run: the first call may or may not create them.
        _ = try await admin.createIsletTopics(partitions: 3)
        let again = try await admin.createIsletTopics(partitions: 3)
        #expect(Set(again.keys) == Set(IsletTopics.all.map(\.name)))
        #expect(again.values.allSatisfy { $0 == .alreadyExisted(partitions: 3) })
        let events = try await admin.configs(of: IsletTopics.activityEvents.name)
        #expect(events["cleanup.policy"] == "delete")
        #expect(events["retention.ms"] == String(7 * 86_400_000))
    }
}
