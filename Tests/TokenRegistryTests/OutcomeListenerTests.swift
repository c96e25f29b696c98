import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry

/// The registry's outcome loop through an in-memory bus: no broker, no sleeps.
@Suite("The outcome listener, on the in-memory bus")
struct OutcomeListenerTests {
    @Test("a 410 invalidates the activity's token; a record that is not an outcome goes to the dead-letter topic; a refused write is retried; everything is marked processed in order")
    func outcomes() async throws {
        let clock = ManualClock()
        let publisher = RecordingPublisher()
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        _ = try await registry.registerActivityToken(user: "alice", activityId: "order-1", activityRequest(token: hexToken(1)))

        let bus = MemoryBus()
        let topic = IsletTopics.pushOutcomes.name
        let source = bus.source([topic])
        let deadLetters = DeadLetterWriter(producer: bus, consumer: source, service: "token-registry", logger: quietLogger, clock: clock)
        let listener = OutcomeListener(consumer: source, deadLetters: deadLetters, registry: registry, logger: quietLogger, clock: clock)
        let running = Task { try await listener.run() }

        try await bus.send(topic: topic, key: "order-1", value: Array("not an outcome".utf8), headers: [], partition: nil)
        publisher.refuse(true)
        let dead = PushOutcome(
            requestId: "r1", activityId: "order-1", result: .tokenInvalid,
            apns: .init(status: 410, reason: "Unregistered", timestamp: clock.date.addingTimeInterval(60)), attempts: 1,
            tokenFingerprint: TokenFingerprint.of(token: hexToken(1)), completedAt: clock.date.addingTimeInterval(60),
            bundleId: "com.example.food")
        try await bus.send(dead, to: topic)
        // The dead letter is written and marked; the outcome waits (on the clock) while Kafka
        // refuses the invalidation, unmarked; then it is retried.
        while clock.sleepers == 0 { await Task.yield() }
        #expect(source.processed(topic) == 0)
        #expect(bus.records(IsletTopics.deadLetters.name).count == 1)
        publisher.refuse(false)
        clock.advance(1)
        while source.processed(topic) != 1 { await Task.yield() }

        #expect(publisher.records.last?.state == .invalidated)
        #expect(publisher.records.last?.invalidation?.reason == .apnsUnregistered)
        let letter = try IsletJSON.decode(DeadLetterRecord.self, from: bus.records(IsletTopics.deadLetters.name)[0].value ?? [])
        #expect(letter.reason == .undecodable && letter.origin.offset == 0 && letter.service == "token-registry")
        source.shutdown()
        try await running.value
    }
}
