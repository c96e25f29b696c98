import Foundation
import IsletKafka
import HeapModule
import IsletMessages
import IsletTokens
import Synchronization

/// The freshness monitor's side of the engine: the pass over the activities due, and what is stale.
extension ContentEngine {
    /// The freshness monitor's pass: for each live activity, what to send by itself — its latest
    /// content again when stale (at most ``FreshnessPolicy/maximumResends`` times, spaced), its
    /// end when severely stale or at the end of its lifetime. Forgets activities not heard of
    /// within the retention. Send the results, then ``commit(_:)`` each.
    ///
    /// Looks only at the activities due (their deadline passed) and at those whose token is dead
    /// (whether the app registered one again), never at every activity.
    /// - Parameter owned: the partitions this instance owns (`nil`: all); other instances look
    ///   after the rest. An activity of another partition stays scheduled at its own deadline, so
    ///   that it is looked at once its partition is owned (until then its owner's requests, read
    ///   back, move it on).
    public func sweep(owned: Set<Int32>? = nil) -> [Prepared] {
        let now = clock.date
        let policy = freshness
        let tokens = self.tokens
        return state.withLock { state -> [Prepared] in
            state.revive(owned: owned, now: now, policy: policy) { Self.registeredAgain($1, token: tokens.token(forKey: $0)) }
            state.scheduleNewlyOwned(owned, now: now)
            let due = state.deadlines.popDue(now: now)
            state.examinedInLastSweep = due.count
            state.payloadsToRead = []
            state.unconfirmedStarts = []
            var prepared = due.compactMap { slot in look(at: slot, in: &state, owned: owned, now: now, policy: policy) }
            catchUpDevices(in: &state, owned: owned, now: now, prepared: &prepared)
            endsOwed(in: &state, owned: owned, now: now, prepared: &prepared)
            state.pruneStartOwners()
            state.pruneRecentChannelStarts(now: now, keep: 2 * Self.channelEndMargin)
            return prepared
        }
    }

    /// One activity due in a pass: forgotten past the retention, put off when another instance
    /// owns it (or its payload is lost), else what the monitor sends for it, if anything.
    private func look(at slot: Int32, in state: inout ActivityMemories, owned: Set<Int32>?, now: Date, policy: FreshnessPolicy) -> Prepared? {
        let (activityKey, memory) = (state.slots[Int(slot)].key, state.slots[Int(slot)].memory)
        guard !activityKey.isEmpty, let latest = memory.latest else { return nil }
        // Forgotten whoever owns it: the retention is about memory, not about sending.
        if !memory.isLive, now.timeIntervalSince(latest.createdAt) > policy.retention / .seconds(1) {
            state.set(activityKey, nil, now: now, policy: policy)
            return nil
        }
        // Scheduled again as it is: at once when there is something to do. If the request
        // made now is persisted, ``commit(_:)`` schedules the activity's next deadline;
        // if not, the next pass decides again.
        state.look(at: slot, memory, now: now, policy: policy)
        if memory.startWatch != nil, ActivityMemories.isOwned(memory, by: owned) {
            watchStart(activityKey, memory, in: &state, now: now, policy: policy)
        }
        // Another instance's, or nothing the monitor can do (its payload lost): looked at
        // again in a minute, not on every pass.
        if memory.isLive, !ActivityMemories.isOwned(memory, by: owned) || memory.payloadLost {
            // (Earlier when its freshness class changes by then: the counts stay exact.)
            var later = now.addingTimeInterval(60)
            if let since = memory.staleSince(now: now) {
                let severe = since.addingTimeInterval(policy.severeAfter / .seconds(1))
                if severe > now { later = min(later, severe) }
            }
            state.deadlines.schedule(slot, at: later, now: now)
            return nil
        }
        let floor = memory.partition.flatMap { state.timestampFloors[$0] }
        guard memory.isLive, let item = followUp(activityKey, memory, latest: latest, now: now, policy: policy, timestampFloor: floor) else {
            return nil
        }
        if item.requests.isEmpty, let position = memory.payloadToRead {
            state.payloadsToRead.append(PayloadToRead(activityKey: activityKey, position: position, requestId: latest.requestId))
            return nil
        }
        return item
    }

    /// The start's watchdog: a push-to-start APNs accepted whose activity's update token has not
    /// come within ``FreshnessPolicy/startConfirmation`` is unconfirmed (since iOS 27 a
    /// push-to-start token can go stale: APNs answers 200 and no activity appears). The token
    /// came (in any state: the app registered it): the start is confirmed, the watch ends.
    private func watchStart(_ activityKey: String, _ memory: ActivityMemory, in state: inout ActivityMemories, now: Date, policy: FreshnessPolicy) {
        guard let watch = memory.startWatch, let latest = memory.latest else { return }
        if tokens.token(forKey: activityKey) != nil {
            state.update(activityKey, now: now, policy: policy) { $0.startWatch = nil }
            return
        }
        guard watch.reportedAt == nil, now.timeIntervalSince(watch.deliveredAt) >= policy.startConfirmation / .seconds(1) else { return }
        let seconds = Int(policy.startConfirmation / .seconds(1))
        // Stamped with the deadline, not the pass's time: an outcome written again (Kafka refused
        // it, or the next owner after a partition moved) carries the same verdict time, so a
        // registration the app made after the first never falls to a repeat.
        let outcome = PushOutcome(
            requestId: watch.requestId, pushToStartKey: watch.pushToStartKey, result: .startUnconfirmed, attempts: 1,
            tokenFingerprint: watch.tokenFingerprint,
            detail: "APNs accepted the push-to-start, and no update token of the activity came from the app within \(seconds) s: the push-to-start token may be stale; it is not used again until the app registers it again",
            completedAt: watch.deliveredAt.addingTimeInterval(policy.startConfirmation / .seconds(1)), bundleId: latest.app.bundleId,
            attributesType: latest.attributesType, startActivityId: MessageKey.splitActivity(activityKey)?.activityId)
        state.unconfirmedStarts.append(UnconfirmedStart(activityKey: activityKey, outcome: outcome))
    }

    /// A start the watchdog found unconfirmed, and its outcome to write.
    public struct UnconfirmedStart: Sendable, Equatable {
        public var activityKey: String
        public var outcome: PushOutcome
    }

    /// The starts the last pass found unconfirmed: write each `startUnconfirmed` to
    /// `islet.push-outcomes.v1`, then ``reported(_:)``. One not reported is found again on the next pass.
    public func takeUnconfirmedStarts() -> [UnconfirmedStart] {
        state.withLock { state in
            defer { state.unconfirmedStarts = [] }
            return state.unconfirmedStarts
        }
    }

    /// The start's `startUnconfirmed` is on Kafka: its watch is done.
    public func reported(_ start: UnconfirmedStart) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            state.update(start.activityKey, now: now, policy: policy) { memory in
                guard var watch = memory.startWatch, watch.requestId == start.outcome.requestId, watch.reportedAt == nil else { return }
                watch.reportedAt = start.outcome.completedAt
                memory.startWatch = watch
            }
        }
    }

    /// What the monitor sends by itself for a live activity at `now`, if anything: its latest content
    /// again (stale, re-sends left, spaced), or its end (severely stale, or its lifetime over).
    private func followUp(
        _ activityKey: String, _ memory: ActivityMemory, latest: LatestRequest, now: Date, policy: FreshnessPolicy, timestampFloor: Int64?
    ) -> Prepared? {
        let followUp: FollowUp
        if let started = memory.startedAt, now.timeIntervalSince(started) >= policy.lifetime / .seconds(1) {
            followUp = .end(.lifetimeExceeded)
        } else {
            switch memory.freshness(now: now, policy: policy) {
            case .severelyStale?:
                followUp = .end(.severelyStale)
            case .staleRecoverable?:
                guard memory.resends < policy.maximumResends else { return nil }
                if let last = memory.lastResendAt, now.timeIntervalSince(last) < policy.resendSpacing / .seconds(1) { return nil }
                followUp = .resend
            case .fresh?, nil:
                return nil
            }
        }
        let requestId = followUp == .resend
            ? RequestIds.resend(of: memory.contentRequestId ?? latest.requestId, number: memory.resends + 1)
            : RequestIds.end(after: latest.requestId)
        // The request is to be read again first: nothing to send yet (the caller notes it).
        if memory.payloadToRead != nil { return Prepared(requests: [], shrinks: [], activityKey: activityKey, memory: memory) }
        guard let full = memory.latestRequest else { return nil }
        let timestamp = ContentTimestamps.next(wanted: ContentTimestamps.seconds(now), now: now, last: memory.lastTimestamp, floor: timestampFloor)
        // The registration it goes to, when the table has one (a broadcast goes to none).
        let registeredAt = full.isBroadcast ? nil : tokens.token(forKey: activityKey).map(\.registeredAt)
        guard
            let request = assembler.followUp(
                followUp, of: full, requestId: requestId, timestamp: timestamp, now: now, tokenRegisteredAt: registeredAt)
        else { return nil }
        var next = memory
        next.replay(request)
        var item = Prepared(requests: [request], shrinks: [], activityKey: activityKey, memory: next)
        if case .end(let reason) = followUp {
            item.invalidation = reason
            // The end reaches every device of the activity (a re-send is the first device's, whose
            // outcomes the monitor follows).
            item.requests = withDeviceCopies([request], devices: deviceTokens(of: activityKey))
        }
        return item
    }

    /// Whether the activity's token, declared dead, was registered since: an active record the
    /// verdict does not kill (``TokenVerdict``, the rule token-registry and apns-dispatcher apply:
    /// another token, or the same registered after APNs's verdict); without a verdict (the
    /// dispatcher found the token invalidated), any active record.
    static func registeredAgain(_ memory: ActivityMemory, token record: DeliveryToken?) -> Bool {
        guard let record, record.state == .active else { return false }
        guard let since = memory.goneAt else { return true }
        let verdict = TokenVerdict(reason: .apnsUnregistered, fingerprint: memory.goneToken, since: since)
        return !verdict.kills(fingerprint: record.fingerprint, registeredAt: record.registeredAt)
    }

    /// The live activities that are not fresh, most stale first.
    public func staleActivities(limit: Int = 1_000) -> [StaleActivity] {
        let now = clock.date
        let policy = freshness
        let stale = state.withLock { state in
            state.catchUp(now: now, policy: policy)
            return state.notFresh.keys.compactMap { slot -> StaleActivity? in
                let (activityKey, memory) = (state.slots[Int(slot)].key, state.slots[Int(slot)].memory)
                guard !activityKey.isEmpty, let freshness = memory.freshness(now: now, policy: policy), freshness != .fresh,
                    let since = memory.staleSince(now: now), let latest = memory.latest
                else { return nil }
                return StaleActivity(
                    activityId: String(activityKey.drop { $0 != "/" }.dropFirst()),
                    bundleId: latest.app.bundleId, attributesType: latest.attributesType, freshness: freshness, staleSince: since,
                    contentSequence: latest.contentSequence, resends: memory.resends)
            }
        }
        return Array(
            stale.sorted { ($0.staleSince, $0.bundleId, $0.activityId) < ($1.staleSince, $1.bundleId, $1.activityId) }.prefix(limit))
    }

    /// Live activities per freshness class (for /metrics).
    public func freshnessCounts() -> [Freshness: Int] {
        let now = clock.date
        let policy = freshness
        return state.withLock { state in
            state.catchUp(now: now, policy: policy)
            var counts = Dictionary(uniqueKeysWithValues: Freshness.allCases.map { ($0, state.notFreshCounts[$0] ?? 0) })
            counts[.fresh] = state.liveCount - state.notFresh.count
            return counts
        }
    }

    /// Activities the last ``sweep(owned:)`` found due and looked at: tests check that a pass is
    /// proportional to what is due.
    var examinedInLastSweep: Int { state.withLock { $0.examinedInLastSweep } }
}
