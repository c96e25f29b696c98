/// The facts a client's health is decided from, at one moment. Kept apart from the clients so the
/// rule can be tested without a broker.
struct KafkaHealthSnapshot: Sendable, Equatable {
    enum Phase: Sendable, Equatable {
        /// ``KafkaProducer/run()`` or ``KafkaConsumer/run()`` has not started.
        case notStarted
        case running
        /// Recreating the client after it became unusable.
        case recovering(reason: String)
        case stopping
    }

    var phase: Phase
    /// Recreations in a row without a success since.
    var consecutiveRecoveries: Int
    /// Why the last recreation happened (for the `failed` reason).
    var lastRecoveryReason: String?
    /// When the cluster last answered (0: never).
    var lastContact: UInt64
    /// Producers: records handed to librdkafka and not yet reported on, and since when that count
    /// has been above zero without a successful delivery.
    var waiting: Int = 0
    var waitingSince: UInt64 = 0
    /// Consumers in a group: whether the group gave this member its partitions since it (re)joined.
    var awaitingAssignment: Bool = false
    /// Replicas: how far behind the end of their partitions they are and have not gained on it
    /// since (``LagWatch``).
    var fallingBehind: LagWatch.Behind?
    /// Group members: how far behind the end they are, having read nothing while fetching since
    /// (``LagWatch/starved``). One is recreated with a longer fetch wait
    /// (``KafkaHealthPolicy/longestFetchWait``); starved at the longest, it is not ready.
    var starved: LagWatch.Behind?
    /// The `fetch.wait.max.ms` its handle fetches with.
    var fetchWaitMilliseconds: Int = 0
    /// The cluster refused the client's login after it last answered (``ClusterContact/loginRefused``).
    var loginRefused: LoginRefused? = nil

    func health(now: UInt64, policy: KafkaHealthPolicy) -> KafkaClientHealth {
        if consecutiveRecoveries >= policy.maximumRecoveries {
            return .failed(
                "recreated \(consecutiveRecoveries) times in a row without a success"
                    + (lastRecoveryReason.map { "; last: \($0)" } ?? ""))
        }
        let limit = MonotonicTime.nanoseconds(policy.unreachableAfter)
        switch phase {
        case .notStarted: return .notReady("not started")
        case .stopping: return .notReady("stopping")
        case .recovering(let reason): return .notReady("being recreated after: \(reason)")
        case .running: break
        }
        if let refused = loginRefused {
            return .notReady(
                "Kafka refused this client's login (check ISLET_KAFKA_SASL_USERNAME, ISLET_KAFKA_SASL_PASSWORD and ISLET_KAFKA_SASL_MECHANISMS): \(refused.reason)"
            )
        }
        if lastContact == 0 { return .notReady("no answer from Kafka yet") }
        if now > lastContact && now - lastContact > limit {
            return .notReady("no answer from Kafka for \(MonotonicTime.seconds(from: lastContact, to: now))")
        }
        if waiting > 0, waitingSince > 0, now > waitingSince, now - waitingSince > limit {
            return .notReady("\(waiting) records not acknowledged for \(MonotonicTime.seconds(from: waitingSince, to: now))")
        }
        if awaitingAssignment { return .notReady("waiting for the consumer group to assign partitions") }
        if let behind = fallingBehind, behind.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now) {
            return .notReady(
                "\(behind.records) records behind the end of its partitions, not gained on for \(MonotonicTime.seconds(from: behind.since, to: now))")
        }
        if let starved, starved.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now) {
            return .notReady(
                "\(starved.records) records behind the end of its partitions, nothing read for \(MonotonicTime.seconds(from: starved.since, to: now))"
                    + " though fetching (\(fetchWaitMilliseconds) ms fetch wait)")
        }
        return .ready
    }
}
