import ArgumentParser
import Foundation
import IsletDemoKit
import IsletKafka

struct Play: AsyncParsableCommand {
    @Option var bootstrap: String
    @Option var registry = "http://127.0.0.1:8081"
    @Option var simulator = "http://127.0.0.1:8090"
    @Option var ingest = "http://127.0.0.1:8084"
    @Option var images = "http://127.0.0.1:8099"
    @Option(help: "The registry's HS256 key, kid=secret.") var jwtKey: String
    @Option(help: "content-service's HTTP API.") var content = "http://127.0.0.1:8083"
    @Option(help: "A backend key with write: one step of the food order then goes through content-service's HTTP API.") var backendKey: String?
    @Option(help: "food, ride, match or all.") var scenario = "all"
    @Option(help: "The apps' backends' ticket key, kid=secret (one of token-registry's ISLET_TICKET_HS256_KEYS): registrations carry tickets.")
    var ticketKey: String?

    func run() async throws {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        let producing = Task { try await producer.run() }
        let endpoints = DemoEndpoints(
            bootstrap: bootstrap, registry: registry, simulator: simulator, ingest: ingest, images: images, jwtKey: jwtKey,
            content: content, backendKey: backendKey, ticketKey: ticketKey)
        let world = try await World(endpoints: endpoints, producer: producer)
        guard ["food", "ride", "match", "all"].contains(scenario) else { throw ValidationError("--scenario is food, ride, match or all") }
        if scenario == "food" || scenario == "all" { try await world.food() }
        if scenario == "ride" || scenario == "all" { try await world.ride() }
        if scenario == "match" || scenario == "all" { try await world.match() }
        producer.shutdown()
        try await producing.value
    }
}
