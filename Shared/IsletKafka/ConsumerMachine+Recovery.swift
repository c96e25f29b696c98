/// The handle's recoveries, the lag watch and the health of a ``ConsumerMachine``.
extension ConsumerMachine {
    // MARK: Recovery

    /// A replacement of the handle begins after `reason`; returns how many in a row this is.
    mutating func beginRecovery(reason: KafkaError) -> Int {
        recovery.consecutive += 1
        recovery.total += 1
        recovery.under = "\(reason)"
        recovery.lastReason = "\(reason)"
        recovery.attempt = recovery.consecutive
        recovery.failures = 0
        return recovery.consecutive
    }

    /// Whether to make the next handle, and after which backoff
    /// (``KafkaHealthPolicy/backoff(beforeRecovery:)``: none before the first replacement in a row).
    func nextRecreation() -> Recreation {
        stopRequested ? .stop : .make(after: policy.backoff(beforeRecovery: recovery.attempt + recovery.failures))
    }

    /// A new handle could not be made: it counts toward `failed` like a replacement.
    mutating func recreationFailed() {
        recovery.failures += 1
        recovery.consecutive += 1
    }

    /// The new handle is in place. A replica that was assigned its partitions has recovered (it
    /// has no group to wait for); a group member has once the group assigns it partitions.
    mutating func recreated() {
        recovery.under = nil
        if !inGroup { recovery.consecutive = 0 }
    }

    /// The new handle works (records came, or the group assigned it partitions).
    mutating func recovered() {
        if recovery.under == nil { recovery.consecutive = 0 }
    }

    var recoveries: Int { recovery.total }

    // MARK: Fetch wait and lag

    /// A handle fetching with `milliseconds` of `fetch.wait.max.ms` is in use. A new one
    /// (`newHandle`) has its starvation measured afresh, and a group member waits for the group again.
    mutating func useFetchWait(milliseconds: Int, newHandle: Bool) {
        fetchWaitMilliseconds = milliseconds
        guard newHandle else { return }
        lag.restartStarvation()
        if inGroup { awaitingAssignment = true }
    }

    /// Whether the lag is due for a look at `now` (every ``KafkaHealthPolicy/lagLookInterval``);
    /// if so, the look counts as taken.
    mutating func lagLookDue(at now: UInt64) -> Bool {
        guard lagLookedAt == 0 || now &- lagLookedAt >= lagLookInterval else { return false }
        lagLookedAt = now
        return true
    }

    /// Where a group member started reading the partitions it owns, as far as known (their
    /// committed offsets at assignment, asked for once per assignment), and the owned partitions
    /// not asked about yet. A replica's partitions count nothing without a position.
    func startingOffsets(of owned: [KafkaTopicPartition]) -> (known: [KafkaTopicPartition: Int64], unasked: [KafkaTopicPartition]) {
        guard inGroup else { return ([:], []) }
        return (committedAtAssignment.filter { $0.value >= 0 }, owned.filter { committedAtAssignment[$0] == nil })
    }

    /// The group's committed offsets of partitions asked about (`nil`: none committed).
    mutating func noteCommitted(_ answer: [KafkaTopicPartition: Int64?]) {
        for (partition, offset) in answer where epochOf[partition] != nil { committedAtAssignment[partition] = offset ?? -1 }
    }

    /// Takes a look at the lag `known` of the `owned` partitions at `now`. `clusterAnswers`: the
    /// cluster answered within ``KafkaHealthPolicy/unreachableAfter`` (a broker that is down is
    /// not helped by a longer fetch wait).
    mutating func noteLag(known: [KafkaTopicPartition: Int64], owned: [KafkaTopicPartition], at now: UInt64, clusterAnswers: Bool) -> LagLook {
        let limit = MonotonicTime.nanoseconds(policy.fallingBehindAfter)
        let wasStuck = lag.behind?.lasted(beyond: limit, at: now) ?? false
        lag.note(known: known, owned: owned, consumed: consumed, fetching: paused.isEmpty, at: now)
        let stuck = lag.behind.flatMap { $0.lasted(beyond: limit, at: now) ? $0 : nil }
        return LagLook(wasStuck: wasStuck, stuck: stuck, records: lag.records, longerFetchWait: fetchWaitAfterStarving(at: now, clusterAnswers: clusterAnswers))
    }

    /// The fetch wait to replace the handle with, when the broker has answered this consumer's
    /// fetches with nothing for ``KafkaHealthPolicy/fallingBehindAfter`` while it was behind and
    /// fetching, and the cluster still answers; `nil` otherwise, or when the wait is already
    /// ``KafkaHealthPolicy/longestFetchWait``.
    func fetchWaitAfterStarving(at now: UInt64, clusterAnswers: Bool) -> Duration? {
        guard let starved = lag.starved, starved.lasted(beyond: MonotonicTime.nanoseconds(policy.fallingBehindAfter), at: now), clusterAnswers
        else { return nil }
        return policy.longerFetchWait(after: .milliseconds(fetchWaitMilliseconds))
    }

    // MARK: Health

    /// The facts the consumer's health is decided from, with what the cluster contact knows.
    func healthSnapshot(lastContact: UInt64, loginRefused: LoginRefused?) -> KafkaHealthSnapshot {
        let phase: KafkaHealthSnapshot.Phase
        switch lifecycle {
        case .idle: phase = .notStarted
        case .running: phase = recovery.under.map { .recovering(reason: $0) } ?? (stopRequested ? .stopping : .running)
        case .finished: phase = .stopping
        }
        return KafkaHealthSnapshot(
            phase: phase, consecutiveRecoveries: recovery.consecutive, lastRecoveryReason: recovery.lastReason, lastContact: lastContact,
            awaitingAssignment: awaitingAssignment, fallingBehind: inGroup ? nil : lag.behind, starved: inGroup ? lag.starved : nil,
            fetchWaitMilliseconds: fetchWaitMilliseconds, loginRefused: loginRefused)
    }
}
