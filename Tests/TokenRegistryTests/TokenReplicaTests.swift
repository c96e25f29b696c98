import IsletKafka
import IsletTokens
import Testing

@Suite("Token table replica")
struct TokenReplicaTests {
    @Test("the token tables' replicas fetch with a 50 ms wait (the hot path's is 10 ms, at which the local broker answers a table that fell behind one batch at a time; a replica's default is 100 ms); an operator's setting wins")
    func fetchWait() {
        let table = TokenTableLoader.replicaConfiguration(bootstrapServers: "b", topic: "islet.tokens.v1", clientID: "c", settings: [:])
        #expect(table.settings["fetch.wait.max.ms"] == "50")
        let partitions = PartitionTokenLoader.replicaConfiguration(
            bootstrapServers: "b", topic: "islet.tokens.v1", partitions: [0], clientID: "c", settings: [:])
        #expect(partitions.settings["fetch.wait.max.ms"] == "50")
        #expect(table.membership == .replica)
        #expect(table.topics == ["islet.tokens.v1"])
        let chosen = TokenTableLoader.replicaConfiguration(bootstrapServers: "b", topic: "t", clientID: "c", settings: ["fetch.wait.max.ms": "10"])
        #expect(chosen.settings["fetch.wait.max.ms"] == "10")
    }
}
