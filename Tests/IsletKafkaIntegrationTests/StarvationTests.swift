import IsletKafka
import IsletTesting
import Synchronization
import Testing

/// A group member the broker answers with nothing while it is behind. The local broker (tansu)
/// answers a fetch with what it read within the fetch's wait: with `fetch.wait.max.ms=0` it reads
/// nothing at all, which is what a 10 ms wait meets once it holds gigabytes (measured at a million
/// activities). Real broker, real starvation.
@Suite("A starved consumer", .serialized, .enabled(if: TestBroker.shouldRun))
struct StarvationTests {
    /// Looks at the lag often and calls a member starved after a second.
    static func policy(longestFetchWait: Duration) -> KafkaHealthPolicy {
        var policy = KafkaHealthPolicy(unreachableAfter: .seconds(5))
        policy.fallingBehindAfter = .seconds(1)
        policy.lagLookInterval = .milliseconds(200)
        policy.lagTolerance = 10
        policy.longestFetchWait = longestFetchWait
        return policy
    }

    /// A topic of one partition holding `total` records, the first `committed` of them read and
    /// committed by a member of `group` that has left.
    static func backlog(_ servers: String, group: String, total: Int, committed: Int) async throws -> String {
        let topic = uniqueName("starved")
        try await createTopic(servers, topic, partitions: 1)
        let producer = try makeProducer(servers)
        try await withProducer(producer) { producer in
            for i in 0..<committed { try await producer.send(topic: topic, key: "k", value: Array("\(i)".utf8)) }
        }
        let first = try makeConsumer(servers, group: group, topics: [topic])
        try await withRunning([first], "the first member reads and commits") {
            var read = 0
            for await message in first.messages {
                first.markProcessed(message)
                read += 1
                if read == committed { break }
            }
        }
        try await withProducer(try makeProducer(servers)) { producer in
            for i in committed..<total { try await producer.send(topic: topic, key: "k", value: Array("\(i)".utf8)) }
        }
        return topic
    }

    static func member(_ servers: String, group: String, topic: String, policy: KafkaHealthPolicy) throws -> KafkaConsumer {
        var configuration = KafkaConsumerConfiguration(
            bootstrapServers: servers, groupID: group, topics: [topic], settings: ["fetch.wait.max.ms": "0", "session.timeout.ms": "6000"])
        configuration.health = policy
        return try KafkaConsumer(configuration: configuration, logger: testLogger)
    }

    @Test("fetching with a wait the broker cannot answer in, it reads nothing: at the longest wait allowed it is not ready, saying so")
    func starvedAtTheLongestWait() async throws {
        let servers = try TestBroker.servers()
        let group = uniqueName("g")
        let topic = try await Self.backlog(servers, group: group, total: 600, committed: 100)
        let member = try Self.member(servers, group: group, topic: topic, policy: Self.policy(longestFetchWait: .zero))
        let read = SharedCounter()
        try await withRunning([member], "the starved member") {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in member.messages { read.increment() }
                }
                try await waitUntil("not ready, starved", timeout: .seconds(30)) { member.health.reason?.contains("nothing read") == true }
                member.shutdown()
            }
        }
        #expect(read.count == 0, "the broker answered a 0 ms fetch with records: this test no longer starves the member")
        #expect(member.fetchWait == .zero)
    }

    @Test("starved, it fetches again with a longer wait and reads the rest, from its committed offset, each record once")
    func recoversWithALongerWait() async throws {
        let servers = try TestBroker.servers()
        let group = uniqueName("g")
        let topic = try await Self.backlog(servers, group: group, total: 2_000, committed: 100)
        let member = try Self.member(servers, group: group, topic: topic, policy: Self.policy(longestFetchWait: .milliseconds(500)))
        let values = Collected()
        try await withRunning([member], limit: .seconds(90), "the starved member") {
            for await message in member.messages {
                member.markProcessed(message)
                if values.append(String(decoding: message.value ?? [], as: UTF8.self)) == 1_900 { break }
            }
        }
        #expect(values.all == (100..<2_000).map { "\($0)" })
        #expect(member.fetchWait > .zero, "read after its handle was replaced with a longer wait")
        #expect(member.fetchWait <= .milliseconds(500))
    }
}

/// Values a test's tasks collect, in order.
final class Collected: Sendable {
    private let values = Mutex<[String]>([])
    /// Appends `value`; returns how many there are now.
    func append(_ value: String) -> Int {
        values.withLock {
            $0.append(value)
            return $0.count
        }
    }
    var all: [String] { values.withLock { $0 } }
}
