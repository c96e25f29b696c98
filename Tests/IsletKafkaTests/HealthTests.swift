import Testing
@testable import IsletKafka

@Suite("Kafka client health rule")
struct HealthRuleTests {
    let policy = KafkaHealthPolicy(unreachableAfter: .seconds(5), maximumRecoveries: 3)
    let second: UInt64 = 1_000_000_000

    func snapshot(_ phase: KafkaHealthSnapshot.Phase = .running, contact: UInt64 = 100) -> KafkaHealthSnapshot {
        KafkaHealthSnapshot(phase: phase, consecutiveRecoveries: 0, lastContact: contact * second)
    }

    @Test("ready while the cluster answered within unreachableAfter; not ready before the first answer and after that")
    func contact() {
        #expect(snapshot().health(now: 104 * second, policy: policy) == .ready)
        #expect(snapshot().health(now: 106 * second, policy: policy).status == .notReady)
        #expect(snapshot().health(now: 106 * second, policy: policy).reason == "no answer from Kafka for 6.0 s")
        #expect(snapshot(contact: 0).health(now: 1 * second, policy: policy).reason == "no answer from Kafka yet")
    }

    @Test("records unacknowledged for longer than unreachableAfter make a producer not ready even while probes answer")
    func waiting() {
        var facts = snapshot()
        facts.waiting = 3
        facts.waitingSince = 96 * second
        #expect(facts.health(now: 102 * second, policy: policy).status == .notReady)
        facts.waitingSince = 98 * second
        #expect(facts.health(now: 102 * second, policy: policy) == .ready)
    }

    @Test("not started, stopping, recovering and awaiting an assignment are not ready; too many recoveries in a row is failed")
    func phases() {
        #expect(snapshot(.notStarted).health(now: 100 * second, policy: policy).status == .notReady)
        #expect(snapshot(.stopping).health(now: 100 * second, policy: policy).status == .notReady)
        #expect(snapshot(.recovering(reason: "fenced")).health(now: 100 * second, policy: policy).reason == "being recreated after: fenced")
        var facts = snapshot()
        facts.awaitingAssignment = true
        #expect(facts.health(now: 100 * second, policy: policy).status == .notReady)
        facts.consecutiveRecoveries = 3
        facts.lastRecoveryReason = "PRODUCER_FENCED"
        let failed = facts.health(now: 100 * second, policy: policy)
        #expect(failed.status == .failed)
        #expect(failed.reason?.contains("PRODUCER_FENCED") == true)
    }

    @Test("a consumer within the tolerance keeps up; one further behind gains while each look finds it less behind, and is stuck since the last look that did")
    func lagWatch() {
        var watch = LagWatch(tolerance: 100)
        watch.note(records: 80, at: 1 * second)
        #expect(watch.behind == nil)
        // Falls behind: not gaining since this look, until a later one finds it less behind.
        watch.note(records: 5_000, at: 2 * second)
        #expect(watch.behind == LagWatch.Behind(records: 5_000, since: 2 * second))
        watch.note(records: 4_000, at: 3 * second)
        #expect(watch.behind == LagWatch.Behind(records: 4_000, since: 3 * second))
        // Stays at or above the best look: stuck since then, with the latest count.
        watch.note(records: 4_000, at: 4 * second)
        watch.note(records: 6_000, at: 5 * second)
        #expect(watch.behind == LagWatch.Behind(records: 6_000, since: 3 * second))
        // Back within the tolerance: keeping up, and a later fall starts afresh.
        watch.note(records: 100, at: 6 * second)
        #expect(watch.behind == nil)
        watch.note(records: 200, at: 7 * second)
        #expect(watch.behind == LagWatch.Behind(records: 200, since: 7 * second))
    }

    @Test("a replica behind and not gaining for longer than fallingBehindAfter is not ready, saying how far behind; a group member stays ready")
    func fallingBehind() {
        var policy = self.policy
        policy.fallingBehindAfter = .seconds(30)
        var facts = snapshot()
        facts.fallingBehind = LagWatch.Behind(records: 2_500, since: 70 * second)
        #expect(facts.health(now: 99 * second, policy: policy) == .ready)
        let behind = facts.health(now: 102 * second, policy: policy)
        #expect(behind.status == .notReady)
        #expect(behind.reason == "2500 records behind the end of its partitions, not gained on for 32.0 s")
    }

    @Test("each consumer of a service has its own lag series: the client id and its topics (a service's consumers share the client id)")
    func lagSeries() {
        let tokens = ConsumerCore.lagDimensions(clientID: "content-service", topics: ["islet.tokens.v1"])
        let events = ConsumerCore.lagDimensions(clientID: "content-service", topics: ["islet.push-outcomes.v1", "islet.push-requests.v1"])
        #expect(tokens.map(\.0) == ["client", "topics"])
        #expect(tokens.map(\.1) != events.map(\.1))
        #expect(events.map(\.1) == ["content-service", "islet.push-outcomes.v1,islet.push-requests.v1"])
        // The order the topics were given in does not make another series.
        #expect(ConsumerCore.lagDimensions(clientID: "c", topics: ["b", "a"]).map(\.1) == ["c", "a,b"])
    }

    @Test("the backoff before a recreation: none for the first in a row, then doubling up to the maximum")
    func backoff() {
        let policy = KafkaHealthPolicy(recoveryBackoff: .milliseconds(500), maximumRecoveryBackoff: .seconds(3))
        #expect((1...6).map(policy.backoff(beforeRecovery:)) == [.zero, .milliseconds(500), .seconds(1), .seconds(2), .seconds(3), .seconds(3)])
    }

    @Test("the errors that require a new client: fatal ones and the idempotent producer's identity errors, not transient ones")
    func classification() {
        #expect(KafkaError(code: .delivery, message: "", librdkafkaName: "PRODUCER_FENCED").requiresNewClient)
        #expect(KafkaError(code: .delivery, message: "", librdkafkaName: "OUT_OF_ORDER_SEQUENCE_NUMBER").requiresNewClient)
        #expect(KafkaError(code: .client, message: "", isFatal: true).requiresNewClient)
        #expect(!KafkaError(code: .delivery, message: "", librdkafkaName: "_MSG_TIMED_OUT").requiresNewClient)
        #expect(!KafkaError(code: .delivery, message: "", librdkafkaName: "NOT_LEADER_FOR_PARTITION").requiresNewClient)
    }
}
