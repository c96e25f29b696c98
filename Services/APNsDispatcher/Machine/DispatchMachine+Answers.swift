import Foundation
import IsletMessages
import Logging

extension DispatchMachine {
    /// An attempt handed out with ``Action/send(_:)`` is over: APNs answered (`.success`) or did
    /// not (`.failure`). `seconds`: how long the send took, for the latency metric.
    mutating func answered(_ attempt: Attempt, _ result: Result<APNsAnswer, any Error>, seconds: Double, now: Date) -> [Action] {
        self.now = now
        attemptEnded(attempt.key)
        // Whether APNs accepted the team's credentials (for a stopped lane's probe).
        var credentialsAccepted = false
        switch result {
        case .success(let answer):
            window.answered(after: seconds, now: now)
            metrics.answer(status: answer.status, priority: attempt.priority, seconds: seconds)
            credentialsAccepted = handle(answer, to: attempt)
        case .failure(let error):
            // A failed connect says nothing about how loaded APNs is; anything else without an answer does.
            if let transport = error as? APNsTransportError, transport.kind != .connect, transport.kind != .notProcessed {
                window.unanswered(now: now)
            }
            unanswered(attempt, error)
        }
        metrics.sendWindow(window.limit)
        if stoppedLanes[attempt.team]?.probe == attempt.entry.request.requestId {
            probeAnswered(attempt.team, credentialsAccepted: credentialsAccepted)
        }
        pumpReady()
        pump(attempt.key)
        return takeActions()
    }

    /// Does what APNs's answer asks (the one answer table, ``APNsAction``); returns whether the
    /// answer accepted the team's credentials.
    private mutating func handle(_ answer: APNsAnswer, to attempt: Attempt) -> Bool {
        let entry = attempt.entry
        let (key, team, apns) = (attempt.key, attempt.team, answer.response)
        let (priority, fingerprint) = (attempt.priority, attempt.fingerprint)
        var action = APNsAction.forAnswer(status: answer.status, reason: answer.reason)
        // A broadcast has no token to be dead, and a push to a token no channel to be gone.
        if action == .tokenInvalid && attempt.channelId != nil || action == .channelInvalid && attempt.channelId == nil { action = .rejected }
        // Its partition went elsewhere: only APNs's final word is written (it is the truth, whoever
        // owns the partition now); what would be this machine's decision — a retry, giving up,
        // coalescing — is the next owner's to make.
        if !owns(entry), ![.delivered, .tokenInvalid, .rejected, .channelInvalid].contains(action) {
            if action == .renewProviderToken { actions.append(.renewProviderToken(team: team)) }
            if action == .providerTokenChurn { actions.append(.reconnect(team: team)) }
            requeue(entry, key: key, at: now)
            return action.acceptsCredentials
        }
        switch action {
        case .delivered:
            // Ended first: finishing may forget an idle activity, and its end must be remembered.
            if entry.request.event == .end {
                ended(key)
                if entry.request.isBroadcast { broadcastEnded(key) }
            }
            finish(entry, attempt.downgraded ? .deliveredDowngraded : .delivered, apns: apns, priority: priority, fingerprint: fingerprint)
        case .tokenInvalid:
            if let fingerprint, let reason = InvalidationReason(apnsStatus: answer.status, reason: answer.reason) {
                deadTokens[key] = DeadToken(verdict: TokenVerdict(reason: reason, fingerprint: fingerprint, since: answer.timestamp ?? now), at: now)
            }
            finish(entry, .tokenInvalid, apns: apns, priority: priority, fingerprint: fingerprint, detail: "APNs: \(answer.reason ?? "")")
        case .rejected:
            finish(entry, .rejected, apns: apns, priority: priority, fingerprint: fingerprint, detail: "APNs: \(answer.reason ?? "")")
        case .channelInvalid:
            finish(entry, .rejected, apns: apns, priority: priority, fingerprint: fingerprint, detail: "APNs: \(answer.reason ?? ""): the channel is gone")
            channelGone(key, channelId: attempt.channelId, reason: answer.reason ?? "")
        case .renewProviderToken:
            renewProviderToken(for: entry, attempt, apns: apns)
        case .stopLane:
            refusedCredentials(entry, attempt, answer)
        case .backOffToken:
            slots[key]?.notBefore = now.addingTimeInterval(policy.retry.tokenBackoff / .seconds(1))
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint, minimumDelay: policy.retry.tokenBackoff)
        case .providerTokenChurn:
            actions.append(.reconnect(team: team))
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint)
        case .retry:
            retry(entry, key: key, apns: apns, priority: priority, fingerprint: fingerprint)
        }
        return action.acceptsCredentials
    }

    /// ExpiredProviderToken: the team's token renewed and the request sent again, once; a second
    /// time it is rejected.
    private mutating func renewProviderToken(for entry: QueuedRequest, _ attempt: Attempt, apns: PushOutcome.APNsResponse) {
        guard !entry.renewedProviderToken else {
            finish(
                entry, .rejected, apns: apns, priority: attempt.priority, fingerprint: attempt.fingerprint,
                detail: "ExpiredProviderToken after a renewal")
            return
        }
        var entry = entry
        entry.renewedProviderToken = true
        actions.append(.renewProviderToken(team: attempt.team))
        requeue(entry, key: attempt.key, at: now)
    }

    /// APNs refused the team's credentials (403): the lane stops. Held, not finished: a start or
    /// an end lost to a credential hiccup is an activity that never appears or never ends. Sent
    /// again once the lane reopens, unless its attempts are spent.
    private mutating func refusedCredentials(_ entry: QueuedRequest, _ attempt: Attempt, _ answer: APNsAnswer) {
        let (team, reason) = (attempt.team, answer.reason ?? "403")
        if entry.attempts >= policy.retry.maximumAttempts {
            finish(
                entry, .failed, apns: answer.response, priority: attempt.priority, fingerprint: attempt.fingerprint,
                detail: "gave up after \(entry.attempts) attempts: APNs refused \(credentials(of: team)) (\(reason))")
        } else {
            requeue(entry, key: attempt.key, at: now)
        }
        stopLane(team, reason: reason, refused: entry.request.requestId)
    }

    /// No answer from APNs: retried, unless it may have been delivered and was a push-to-start (a
    /// resend could start a second activity).
    private mutating func unanswered(_ attempt: Attempt, _ error: any Error) {
        var entry = attempt.entry
        let transport = error as? APNsTransportError
        metrics.transportError(transport?.kind)
        if transport?.isAmbiguous ?? true {
            entry.ambiguous = true
        }
        // Its partition went elsewhere: no outcome, no retry here (see ``handle(_:to:)``).
        guard owns(entry) else {
            requeue(entry, key: attempt.key, at: now)
            return
        }
        if entry.ambiguous {
            if DispatchEngine.isPushToStart(entry.request) {
                finish(
                    entry, .failed, priority: attempt.priority, fingerprint: attempt.fingerprint,
                    detail: DispatchEngine.unknownStartAnswer + ": \(error)")
                return
            }
        }
        retry(entry, key: attempt.key, apns: nil, priority: attempt.priority, fingerprint: attempt.fingerprint, detail: "\(error)")
    }

    // MARK: Stopped lanes

    /// APNs refused a team's credentials: its pushes are held for the cooldown (from now, also when
    /// the lane was stopped already).
    private mutating func stopLane(_ team: String, reason: String, refused requestId: String) {
        let until = now.addingTimeInterval(policy.laneCooldown / .seconds(1))
        var lane = stoppedLanes[team] ?? StoppedLane(until: until, reason: reason)
        lane.until = until
        lane.reason = reason
        let probed = lane.probe == requestId
        if probed { lane.probe = nil }
        stoppedLanes[team] = lane
        logger.error(
            "APNs refused the team's credentials: its pushes are held until one probe is accepted",
            metadata: ["apns.team": "\(team)", "apns.reason": "\(reason)", "apns.lane.probe.at": "\(IsletDate.format(until))"])
        metrics.laneStopped(team: team)
        // The held activities wait for the new reopening time instead of the probe's answer.
        if probed { pumpHeld(team) }
    }

    /// A stopped lane's probe got an answer that is not a refusal (or got none): the lane reopens
    /// if the answer shows the credentials were accepted; otherwise another request probes it.
    /// Either way the held activities are pumped again.
    private mutating func probeAnswered(_ team: String, credentialsAccepted: Bool) {
        if credentialsAccepted {
            let lane = stoppedLanes.removeValue(forKey: team)
            logger.info("APNs accepted the team's credentials again: its held pushes are sent", metadata: ["apns.team": "\(team)"])
            for key in lane?.held ?? [] { pump(key) }
        } else {
            stoppedLanes[team]?.probe = nil
            pumpHeld(team)
        }
    }

    /// Pumps a stopped lane's held activities again (those still held note themselves again).
    private mutating func pumpHeld(_ team: String) {
        let held = stoppedLanes[team]?.held ?? []
        stoppedLanes[team]?.held = []
        for key in held { pump(key) }
    }

    // MARK: Retries and ends

    /// Another attempt later, within the retry policy's bounds; otherwise the final outcome.
    private mutating func retry(
        _ entry: QueuedRequest, key: String, apns: PushOutcome.APNsResponse?, priority: Int, fingerprint: String?, detail: String? = nil,
        minimumDelay: Duration = .zero
    ) {
        let deadline = policy.retry.deadline(expiration: entry.request.expiration, firstAttempt: entry.firstAttemptAt ?? now)
        let delay = max(policy.retry.delay(afterAttempts: entry.attempts, random: random()), minimumDelay)
        let at = now.addingTimeInterval(delay / .seconds(1))
        guard entry.attempts < policy.retry.maximumAttempts, at <= deadline else {
            let expired = entry.request.expiration.map { $0 <= at } ?? false
            finish(
                entry, expired ? .expired : .failed, apns: apns, priority: priority, fingerprint: fingerprint,
                detail: "gave up after \(entry.attempts) attempts" + (detail.map { ": \($0)" } ?? apns.map { ": APNs \($0.status) \($0.reason ?? "")" } ?? ""))
            return
        }
        metrics.retried()
        requeue(entry, key: key, at: at)
    }

    /// Puts an attempted request back in front of its activity's queue, to be sent at `at` — unless
    /// newer content (or an end) is waiting, which makes it pointless, or its partition is no
    /// longer this machine's (the next owner reads it again). What the next owner must know of
    /// it is persisted first (``Action/note(_:)``), also when it is left to the next owner.
    private mutating func requeue(_ entry: QueuedRequest, key: String, at: Date) {
        guard let slot = slots[key] else { return }
        // Left to the next owner: only its own announcement is taken back (below); nothing decided.
        if !owns(entry) && !(entry.announcementId != nil && !entry.ambiguous) {
            forget(entry, key: key)
            return
        }
        if owns(entry), ActivityQueue.isSupersedableUpdate(entry.request),
            let newer = slot.queue.pending.first(where: {
                $0.request.event == .end || (ActivityQueue.isSupersedableUpdate($0.request) && $0.request.contentSequence >= entry.request.contentSequence)
            })
        {
            finish(entry, .coalesced, supersededBy: newer.request.requestId, detail: "replaced by newer content while waiting to be retried")
            return
        }
        // What the topic says of it must stay true for whoever reads it next: an announcement
        // APNs did not take is taken back (also when the partition is gone: the record is this
        // machine's own, and names the announcement it takes back).
        if let note = note(for: entry), note.result == .retrying || owns(entry) {
            var parkedEntry = entry
            if note.result == .retrying {
                // The next attempt is announced again.
                parkedEntry.handedOff = false
                parkedEntry.announcementId = nil
            } else {
                parkedEntry.handedOff = true
                parkedEntry.announcementId = note.announcementId
            }
            // Held like a push in flight: nothing else of the activity goes meanwhile, and a
            // revocation waits for it.
            slots[key]?.inFlight = parkedEntry
            parked[entry.request.requestId] = Parked(key: key, at: at)
            noting += 1
            actions.append(.note(note))
            return
        }
        guard owns(entry) else {
            forget(entry, key: key)
            return
        }
        putBack(entry, key: key, at: at)
    }

    /// What the partition's next owner must know of a request going back to wait, if anything:
    /// its announced attempt (a push-to-start's, an alerting push's) APNs certainly did not take —
    /// it may be sent again, alert and all (`retrying`, naming the announcement); an alerting push
    /// whose attempt may have reached the phone and was not announced — it is sent again without
    /// its alert (`sending`).
    private mutating func note(for entry: QueuedRequest) -> PushOutcome? {
        let request = entry.request
        let result: PushResult
        let detail: String
        let announcementId: String
        if let announced = entry.announcementId, !entry.ambiguous {
            (result, detail, announcementId) = (.retrying, "APNs did not take it: it is sent again", announced)
        } else if entry.ambiguous && request.alerting && !entry.handedOff {
            (result, detail, announcementId) = (.sending, "an attempt may have reached the phone: it is sent again without its alert", newAnnouncementId())
        } else {
            return nil
        }
        return PushOutcome(
            requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: result,
            attempts: entry.attempts, detail: detail, completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType,
            channelId: request.channelId, contentSequence: request.contentSequence, announcementId: announcementId, deviceId: request.deviceId, apnsTimestamp: request.apnsTimestamp,
            widgetKey: request.widgetKey)
    }

    /// A note handed out with ``Action/note(_:)`` is persisted: its request waits for its retry
    /// (or, its partition given up meanwhile, is left to the next owner).
    mutating func notePersisted(_ note: PushOutcome, now: Date) -> [Action] {
        self.now = now
        let requestId = note.requestId
        guard let parkedRequest = parked.removeValue(forKey: requestId) else { return [] }
        noting -= 1
        let key = parkedRequest.key
        guard let entry = slots[key]?.inFlight, entry.request.requestId == requestId else { return takeActions() }
        if note.result == .retrying, let taken = note.announcementId {
            // Read back at an assignment before this was written, the announcement stands no more.
            maybeDelivered[entry.partition]?[requestId]?.remove(taken)
            if maybeDelivered[entry.partition]?[requestId]?.isEmpty == true { maybeDelivered[entry.partition]?[requestId] = nil }
        }
        slots[key]?.inFlight = nil
        if owns(entry) {
            putBack(entry, key: key, at: parkedRequest.at)
        } else {
            forget(entry, key: key)
        }
        pump(key)
        pumpReady()
        return takeActions()
    }

    /// An attempt handed out with ``Action/send(_:)`` was not sent: its partition was given up
    /// before it went (`announced`: after its announcement was persisted, which is then taken back).
    mutating func withdrawn(_ attempt: Attempt, announced: Bool, now: Date) -> [Action] {
        self.now = now
        attemptEnded(attempt.key)
        var entry = attempt.entry
        entry.attempts -= 1
        if !announced, attempt.announcement != nil {
            // Never announced: as it was before the attempt (its next attempt is announced).
            entry.announcementId = nil
            entry.handedOff = false
        }
        requeue(entry, key: attempt.key, at: now)
        pumpReady()
        pump(attempt.key)
        return takeActions()
    }

    mutating func putBack(_ entry: QueuedRequest, key: String, at: Date) {
        guard var slot = slots[key] else { return }
        slot.queue.returnToFront(entry)
        queued += 1
        slot.notBefore = max(slot.notBefore ?? at, at)
        slots[key] = slot
    }

    /// A request read under an assignment of its partition that is over: no outcome, no retry (the
    /// partition's owner reads it again), its ticket abandoned. A copy of it read under the
    /// partition's current assignment (this machine got it back) takes its place, checked as a
    /// request read is; copies of other assignments are abandoned too. `pumping`: the copy is
    /// looked at now (otherwise by the caller's look at the queue, which it heads).
    mutating func forget(_ entry: QueuedRequest, key: String, pumping: Bool = true) {
        let held = copies.isEmpty ? [] : copies.removeValue(forKey: entry.request.requestId) ?? []
        let current = entry.partition.flatMap { ownedPartitions?[$0] }
        let live = held.filter { current != nil && $0.assignment == current }
        var abandoned = [entry.ticket] + held.filter { current == nil || $0.assignment != current }.map(\.ticket)
        logger.debug("a request of a partition given up is left to its next owner", metadata: ["request.id": "\(entry.request.requestId)"])
        if let first = live.first {
            var copy = QueuedRequest(request: entry.request, ticket: first.ticket, enqueuedAt: now, partition: entry.partition)
            copy.assignment = first.assignment
            copy.ambiguous = entry.ambiguous
            copy.handedOff = entry.handedOff
            if live.count > 1 { copies[entry.request.requestId] = Array(live.dropFirst()) }
            actions.append(.abandon(abandoned))
            abandoned = []
            admit(copy, key: key, atFront: true, pumping: pumping)
            return
        }
        actions.append(.abandon(abandoned))
        forgetIfIdle(key)
    }

    /// An `end` was delivered: updates still waiting are pointless.
    mutating func ended(_ key: String) {
        var slot = slots[key] ?? Slot()
        slot.ended = true
        slot.endedAt = now
        let pointless = slot.queue.removeAll { $0.request.event != .start }
        queued -= pointless.count
        slots[key] = slot
        for entry in pointless { finish(entry, .expired, detail: "the activity has ended: nothing is sent after its end") }
    }

    // MARK: Forgetting

    /// An activity with nothing waiting and nothing to remember (its budget full) is forgotten now;
    /// the others are looked at again by the periodic sweep.
    mutating func forgetIfIdle(_ key: String) {
        if let slot = slots[key], Self.isForgettable(slot, now: now) { slots[key] = nil }
        if budgets.isFresh(key, now: now) { budgets.forget(key) }
        sweep()
    }

    /// A slot that says nothing a fresh one would not: nothing waiting, in flight or scheduled, no
    /// backoff still running, not ended.
    private static func isForgettable(_ slot: Slot, now: Date) -> Bool {
        slot.queue.isEmpty && slot.inFlight == nil && slot.wakeAt == nil && !slot.ended && (slot.notBefore ?? now) <= now
    }

    /// At most every 10 minutes (on the machine's clock), whenever an outcome is finished: forgets
    /// the idle activities, those that ended more than 12 hours ago (iOS has removed them by then;
    /// a late update is stopped by the 8-hour lifetime guard), and the budgets that are full again.
    /// Without it, an activity that spent budget and then got no more requests would be
    /// remembered for ever.
    private mutating func sweep() {
        guard now.timeIntervalSince(lastSweep) > 600 else { return }
        lastSweep = now
        let (now, horizon) = (now, now.addingTimeInterval(-12 * 3_600))
        slots = slots.filter { _, slot in
            if slot.ended { return !((slot.endedAt ?? now) < horizon && slot.queue.isEmpty && slot.inFlight == nil) }
            return !Self.isForgettable(slot, now: now)
        }
        budgets.sweep(now: now)
        while let oldest = floorOrder.first, now.timeIntervalSince(oldest.at) >= Self.floorLifetime { forgetOldestFloor() }
        finishedByActivity.forget(now: now)
        // By now token-registry has invalidated them (within seconds), or the app registered them again.
        deadTokens = deadTokens.filter { now.timeIntervalSince($0.value.at) < 3_600 }
    }
}
