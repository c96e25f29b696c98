import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import Logging
import Synchronization
import Testing
@testable import IsletCLI
import ArgumentParser

// Against the broker scripts/test.sh starts (ISLET_KAFKA_BOOTSTRAP); with ISLET_REQUIRE_BROKER=1 a
// missing broker fails the suite instead of skipping it.

private let logger = testLogger("islet.test.cli-integration")

/// Creates Islet's topics (if missing) as the compose file's kafka-init would, with fewer partitions.
/// The test broker is shared by the whole run: Islet's real topics are always made together, with
/// 3 partitions (the topic administration test checks exactly that, and co-partitioned topics must
/// agree), whichever test comes first. `topics` names the ones this test needs.
private func ensureTopics(_ topics: [IsletTopic]) async throws {
    let admin = try KafkaAdmin(configuration: KafkaAdminConfiguration(bootstrapServers: try TestBroker.servers()), logger: logger)
    let created = try await admin.createIsletTopics(partitions: 3)
    for topic in topics { #expect(created[topic.name] != nil) }
}

/// What `islet tail` printed.
private final class Lines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

@Suite(.enabled(if: TestBroker.shouldRun), .timeLimit(.minutes(2)))
struct CLIIntegrationTests {
    @Test func publishedEventsAreTailedDecoded() async throws {
        try await ensureTopics([IsletTopics.activityEvents])
        let start = Date().addingTimeInterval(-2)
        let activity = "cli-\(UUID().uuidString.lowercased())"
        var published: [String: KafkaDeliveryReport] = [:]
        for (sequence, status) in ["preparing", "out_for_delivery", "delivered"].enumerated() {
            let command = try Islet.parseAsRoot([
                "publish-event", "--activity", activity, "--type", "DeliveryAttributes", "--kind", sequence == 2 ? "end" : "update",
                "--sequence", "\(sequence + 1)", "--field", "status=\(status)", "--field", "courier.name=Ana", "--bootstrap", try TestBroker.servers(),
            ]) as! PublishEvent
            let event = try command.event()
            published[event.eventId] = try await PublishEvent.publish(event, servers: command.kafka.servers(), logger: logger)
        }
        #expect(Set(published.values.map(\.partition)).count == 1, "one key, one partition")

        // From a time, to the end of every partition, only this activity's records.
        let tail = try Islet.parseAsRoot([
            "tail", "events", "--since", IsletDate.format(start), "--no-follow", "--key", activity, "--bootstrap", try TestBroker.servers(),
        ]) as! Tail
        let lines = Lines()
        let printed = try await Tail.tail(try tail.request(), logger: logger) { lines.append($0) }
        #expect(printed == 3)
        #expect(lines.all.count == 3)
        for (eventId, report) in published {
            let line = try #require(lines.all.first { $0.contains("event=\(eventId)") }, "no line for \(eventId) in \(lines.all)")
            #expect(line.contains(" \(report.partition)@\(report.offset!) ActivityEvent "))
            #expect(line.contains(" \(activity) DeliveryAttributes seq="))
            #expect(line.contains(#""courier":{"name":"Ana"}"#))
        }
        #expect(lines.all.contains { $0.contains("ActivityEvent end \(activity)") && $0.contains(#""status":"delivered""#) })

        // From an offset in the activity's partition: the same records, followed until the limit.
        let partition = published.values.first!.partition
        let first = published.values.compactMap(\.offset).min()!
        let fromOffset = try Islet.parseAsRoot([
            "tail", IsletTopics.activityEvents.name, "--offset", "\(first)", "--partition", "\(partition)", "--key", activity,
            "--limit", "3", "--bootstrap", try TestBroker.servers(),
        ]) as! Tail
        let again = Lines()
        #expect(try await Tail.tail(try fromOffset.request(), logger: logger) { again.append($0) } == 3)
        #expect(Set(again.all) == Set(lines.all))
    }

    @Test func tokensAreTailedAsFingerprints() async throws {
        try await ensureTopics([IsletTopics.tokens])
        let start = Date().addingTimeInterval(-2)
        let activity = "cli-\(UUID().uuidString.lowercased())"
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let record = TokenRecord(
            kind: .update, activityId: activity, userId: "alice", token: token, app: AppTarget(bundleId: "com.example.food", environment: .sandbox),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "1.0", state: .active,
            registeredAt: Date(), updatedAt: Date())
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(bootstrapServers: try TestBroker.servers()), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            defer { producer.shutdown() }
            try await producer.send(record)
        }

        var request = TailRequest(topic: IsletTopics.tokens, servers: try TestBroker.servers())
        request.since = start
        request.follow = false
        request.key = activity
        let lines = Lines()
        #expect(try await Tail.tail(request, logger: logger) { lines.append($0) } == 1)
        let line = try #require(lines.all.first)
        #expect(line.contains("TokenRecord update com.example.food/\(activity) state=active token=\(TokenFingerprint.of(token: token))"))
        #expect(!line.contains(token))
    }

    @Test func aPartitionTheTopicLacksIsNamed() async throws {
        var request = TailRequest(topic: IsletTopics.clicks, servers: try TestBroker.servers())
        request.partitions = [9_999]
        request.follow = false
        try await ensureTopics([IsletTopics.clicks])
        await #expect { try await Tail.tail(request, logger: logger) { _ in } } throws: { error in
            "\(error)".contains("there is no partition 9999")
        }
    }
}
