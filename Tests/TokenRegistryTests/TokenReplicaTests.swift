import IsletKafka
import IsletTokens
import Testing

@Suite("Token table replica")
struct TokenReplicaTests {
    @Test("the token table's replica fetches with the hot path's 10 ms wait (a replica's default is 100 ms); an operator's setting wins")
    func fetchWait() {
        let table = TokenTableLoader.replicaConfiguration(bootstrapServers: "b", topic: "islet.tokens.v1", clientID: "c", settings: [:])
        #expect(table.settings["fetch.wait.max.ms"] == "10")
        #expect(table.membership == .replica)
        #expect(table.topics == ["islet.tokens.v1"])
        let chosen = TokenTableLoader.replicaConfiguration(bootstrapServers: "b", topic: "t", clientID: "c", settings: ["fetch.wait.max.ms": "50"])
        #expect(chosen.settings["fetch.wait.max.ms"] == "50")
    }
}
