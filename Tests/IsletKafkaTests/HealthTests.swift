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
