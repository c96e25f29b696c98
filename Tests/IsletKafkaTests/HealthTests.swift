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

    @Test("a login the cluster refused after its last answer makes the client not ready, saying so; an answer after it clears it")
    func loginRefused() {
        let contact = ClusterContact()
        // librdkafka's RD_KAFKA_RESP_ERR__AUTHENTICATION, as its error callback reports a refused SASL login.
        let refused = KafkaError(
            code: .client, message: "sasl_plaintext://kafka:9092/bootstrap: SASL authentication error: SASL SCRAM authentication failed",
            librdkafkaCode: -169)
        contact.observe(KafkaError(code: .client, message: "1/1 brokers are down", librdkafkaCode: -187), at: 5 * second)
        #expect(contact.loginRefused == nil)
        contact.observe(refused, at: 10 * second)
        var facts = snapshot(contact: 0)
        facts.loginRefused = contact.loginRefused
        #expect(facts.health(now: 11 * second, policy: policy).status == .notReady)
        #expect(
            facts.health(now: 11 * second, policy: policy).reason
                == "Kafka refused this client's login (check ISLET_KAFKA_SASL_USERNAME, ISLET_KAFKA_SASL_PASSWORD and ISLET_KAFKA_SASL_MECHANISMS): sasl_plaintext://kafka:9092/bootstrap: SASL authentication error: SASL SCRAM authentication failed"
        )
        contact.heard(at: 12 * second)
        #expect(contact.loginRefused == nil)
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
        var read: UInt64 = 0
        func look(_ records: Int64, at seconds: UInt64) {
            read += 10  // reads at every look here
            watch.note(records: records, consumed: read, fetching: true, at: seconds * second)
        }
        look(80, at: 1)
        #expect(watch.behind == nil)
        // Falls behind: not gaining since this look, until a later one finds it less behind.
        look(5_000, at: 2)
        #expect(watch.behind == LagWatch.Behind(records: 5_000, since: 2 * second))
        look(4_000, at: 3)
        #expect(watch.behind == LagWatch.Behind(records: 4_000, since: 3 * second))
        // Stays at or above the best look: stuck since then, with the latest count.
        look(4_000, at: 4)
        look(6_000, at: 5)
        #expect(watch.behind == LagWatch.Behind(records: 6_000, since: 3 * second))
        #expect(watch.starved?.since == 5 * second, "it read until this look: starved, if at all, only from here on")
        // Back within the tolerance: keeping up, and a later fall starts afresh.
        look(100, at: 6)
        #expect(watch.behind == nil)
        look(200, at: 7)
        #expect(watch.behind == LagWatch.Behind(records: 200, since: 7 * second))
    }

    @Test("a lower lag with nothing read is not progress (a watermark reported lower); knowing fewer partitions is not either")
    func lagWatchNeedsReads() {
        var watch = LagWatch(tolerance: 100)
        let a = KafkaTopicPartition(topic: "t", partition: 0)
        let b = KafkaTopicPartition(topic: "t", partition: 1)
        watch.note(known: [a: 900_000, b: 40_000], owned: [a, b], consumed: 57_625, fetching: true, at: 10 * second)
        #expect(watch.records == 940_000)
        // The broker reports a lower end for one partition; nothing was read: still stuck since 10 s.
        watch.note(known: [a: 800_000, b: 40_000], owned: [a, b], consumed: 57_625, fetching: true, at: 15 * second)
        #expect(watch.behind == LagWatch.Behind(records: 840_000, since: 10 * second))
        // A look that knows only one partition keeps the other's last lag.
        watch.note(known: [b: 41_000], owned: [a, b], consumed: 57_625, fetching: true, at: 20 * second)
        #expect(watch.records == 841_000)
        #expect(watch.behind?.since == 10 * second)
        // A partition revoked stops counting.
        watch.note(known: [:], owned: [b], consumed: 57_625, fetching: true, at: 25 * second)
        #expect(watch.records == 41_000)
    }

    @Test("behind and reading nothing while fetching is starved since the first such look; reading, or a pause for a busy caller, ends it")
    func starvation() {
        var watch = LagWatch(tolerance: 100)
        watch.note(records: 5_000, consumed: 7, fetching: true, at: 1 * second)
        watch.note(records: 5_500, consumed: 7, fetching: true, at: 2 * second)
        #expect(watch.starved == LagWatch.Behind(records: 5_500, since: 1 * second))
        // A record read: starved afresh from this look on only if nothing comes again.
        watch.note(records: 5_600, consumed: 8, fetching: true, at: 3 * second)
        #expect(watch.starved == LagWatch.Behind(records: 5_600, since: 3 * second))
        // Paused because the caller is busy: reading nothing is expected, not starvation.
        watch.note(records: 5_600, consumed: 8, fetching: false, at: 4 * second)
        #expect(watch.starved == nil)
        watch.note(records: 5_600, consumed: 8, fetching: true, at: 5 * second)
        #expect(watch.starved?.since == 5 * second)
        // A new handle gets its own chance.
        watch.restartStarvation()
        #expect(watch.starved == nil)
        // Within the tolerance there is nothing to starve for.
        watch.note(records: 50, consumed: 8, fetching: true, at: 6 * second)
        #expect(watch.starved == nil && watch.behind == nil)
    }

    @Test("a starved consumer's next fetch wait: four times longer, up to the longest; none past it")
    func longerFetchWait() {
        let policy = KafkaHealthPolicy()
        var waits: [Duration] = []
        var wait = Duration.zero
        while let next = policy.longerFetchWait(after: wait) {
            waits.append(next)
            wait = next
        }
        #expect(waits == [.milliseconds(1), .milliseconds(4), .milliseconds(16), .milliseconds(64), .milliseconds(256), .milliseconds(500)])
        #expect(policy.longerFetchWait(after: .milliseconds(10)) == .milliseconds(40))
    }

    @Test("a group member starved for longer than fallingBehindAfter is not ready, saying so and with its fetch wait")
    func starvedGroupMember() {
        var policy = self.policy
        policy.fallingBehindAfter = .seconds(30)
        var facts = snapshot()
        facts.fetchWaitMilliseconds = 500
        facts.starved = LagWatch.Behind(records: 942_375, since: 70 * second)
        #expect(facts.health(now: 99 * second, policy: policy) == .ready)
        let starved = facts.health(now: 102 * second, policy: policy)
        #expect(starved.status == .notReady)
        #expect(starved.reason == "942375 records behind the end of its partitions, nothing read for 32.0 s though fetching (500 ms fetch wait)")
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
