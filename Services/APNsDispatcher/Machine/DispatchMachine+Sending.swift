import DequeModule
import Foundation
import HeapModule
import IsletMessages
import IsletTokens
import Logging
import NIOCore

/// Sending: the head of an activity's queue checked (token, budget, lane), sent, and finished.
extension DispatchMachine {
    /// Why a request of an app no scoped key covers in its environment is rejected.
    static func uncoveredDetail(_ app: AppTarget) -> String {
        "no APNs signing key covers \(app.bundleId) in \(app.environment.rawValue) (ISLET_APNS_SCOPED_KEYS: a key limited to other topics or the other environment)"
    }

    /// Sends the activity's first waiting request if nothing stops it; otherwise schedules a look
    /// at it for when something may have changed. Nothing new is sent once a drain began.
    mutating func pump(_ key: String) {
        guard isAccepting else { return }
        while true {
            // No copy of the slot is kept: the queue changes below (see `submit`).
            guard let head = slots[key]?.next else {
                setAwaiting(key, until: nil)
                return
            }
            if let notBefore = slots[key]?.notBefore {
                if notBefore > now { return wake(key, at: notBefore) }
                slots[key]?.notBefore = nil
            }
            switch check(head, key: key, queued: slots[key]?.queue.pending.count ?? 0) {
            case .finished:
                continue
            case .held:
                return
            case .ready(let recipient, let team):
                // A send slot, then the priority the budget allows.
                guard inFlight < window.limit else {
                    if readySet.insert(key).inserted { ready.append(key) }
                    return
                }
                let decision =
                    switch recipient {
                    case .token(let record):
                        budgets.decide(head.request, key: key, record: record, partition: head.partition, now: now, policy: policy.budgets)
                    case .channel(let channel):
                        budgets.decideBroadcast(
                            head.request, key: key, storagePolicy: channel.storagePolicy, partition: head.partition, now: now, policy: policy.budgets)
                    }
                switch decision {
                case .wait(let until):
                    if head.request.isWidget, until > head.enqueuedAt.addingTimeInterval(policy.budgets.widgetMaximumWait / .seconds(1)) {
                        // Not held for long: it would hold its partition's offset back.
                        _ = drop(
                            head, key: key, .expired,
                            "the device's widget budget (\(policy.budgets.widgets.capacity) an hour) is spent for longer than \(Int(policy.budgets.widgetMaximumWait / .seconds(1))) s: not sent (the widget reloads on its own timeline)")
                        continue
                    }
                    wake(key, at: until)
                case .send(let priority, let downgraded):
                    if head.request.priority == 10, let remaining = budgets.remaining(for: key, now: now) { metrics.budgetRemaining(remaining) }
                    startSending(key, recipient: recipient, team: team, priority: priority, downgraded: downgraded)
                }
                return
            }
        }
    }

    /// What becomes of an activity's first waiting request, before a send slot and the budget.
    enum Check {
        /// It has its outcome (or was a copy of a finished one): look at the next.
        case finished
        /// It waits (for its token, for a stopped lane); it is looked at again when that may change.
        case held
        /// Its token (or channel) is usable and its team known.
        case ready(Recipient, team: String)
    }

    /// Whom a request goes to.
    enum Recipient {
        /// The activity's (or a push-to-start) token.
        case token(DeliveryToken)
        /// The activity's broadcast channel.
        case channel(BroadcastChannelRecord)
    }

    /// The request's token (present, active, not refused by APNs), its bounds (lifetime,
    /// expiration), its team's key and lane.
    mutating func check(_ head: QueuedRequest, key: String, queued: Int) -> Check {
        let request = head.request
        guard owns(head) else {
            // Read under an assignment of its partition that is over (kept while APNs made its
            // channel): the next owner does it — or this machine, when the partition came back and
            // a copy was read under the new assignment: that copy takes its place at the head.
            dropHead(key)
            forget(head, key: key, pumping: false)
            return .finished
        }
        if let floor = olderThanSent(request, key: key) {
            return drop(head, key: key, .coalesced, "older than content already sent (#\(floor.sequence))", supersededBy: floor.requestId)
        }
        if request.isBroadcast { return checkBroadcast(head, key: key) }
        // Without a usable token the request waits for a record (``tokenArrived(_:now:)`` wakes
        // it): a missing one for the token wait; an invalidated or refused one briefly, since the
        // app may have registered it again (reinstalled) just before this content was made and the
        // table not have read it yet.
        guard let record = tokens.token(forKey: key) else {
            return waitForToken(head, key: key, queued: queued, wait: policy.tokenWait, .awaitingToken,
                "no token was registered for the activity while the content was current")
        }
        if let wanted = request.tokenRegisteredAt, Self.milliseconds(record.registeredAt) < Self.milliseconds(wanted) {
            // The content was made for a registration this instance's table has not read yet (it
            // lags the topic): it waits for that record (``tokenArrived(_:now:)`` wakes it), not for
            // a guess of how long the table may lag; past the token wait, the record the table
            // holds decides (below).
            let waitEnd = min(head.enqueuedAt.addingTimeInterval(policy.tokenWait / .seconds(1)), request.expiration ?? .distantFuture)
            if now < waitEnd {
                setAwaiting(key, until: waitEnd, requests: queued)
                return .held
            }
        }
        guard record.state == .active, !(deadTokens[key]?.kills(record) ?? false) else {
            return waitForToken(head, key: key, queued: queued, wait: policy.tokenRecheck, .tokenInvalid,
                "the token is \(record.state == .active ? "refused by APNs" : record.state.rawValue)")
        }
        setAwaiting(key, until: nil)
        let startedAt = record.activityStartedAt ?? record.registeredAt
        if request.event == .update, !request.isWidget, now.timeIntervalSince(startedAt) > policy.activityLifetime / .seconds(1) {
            return drop(head, key: key, .expired, "the activity is older than 8 hours: iOS no longer shows updates")
        }
        if let expiration = request.expiration, expiration < now {
            return drop(head, key: key, .expired, "apns-expiration passed before it could be sent")
        }
        if uncovered.contains(record.app) {
            return drop(head, key: key, .rejected, Self.uncoveredDetail(record.app))
        }
        guard teams[record.app.bundleId] != nil, let team = lane(for: record.app) else {
            return drop(head, key: key, .rejected, "no APNs signing key is configured for \(record.app.bundleId)")
        }
        return holdForLane(head, key: key, team: team) ?? .ready(.token(record), team: team)
    }

    /// A date to the millisecond, as records carry it (the token table keeps milliseconds).
    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000).rounded(.down)) }

    /// Holds `head` until `wait` after it was queued (never past its expiration), then ends it as `result`.
    mutating func waitForToken(_ head: QueuedRequest, key: String, queued: Int, wait: Duration, _ result: PushResult, _ detail: @autoclosure () -> String) -> Check {
        let waitEnd = min(head.enqueuedAt.addingTimeInterval(wait / .seconds(1)), head.request.expiration ?? .distantFuture)
        if now < waitEnd {
            setAwaiting(key, until: waitEnd, requests: queued)
            return .held
        }
        setAwaiting(key, until: nil)
        return drop(head, key: key, result, detail())
    }

    mutating func drop(_ head: QueuedRequest, key: String, _ result: PushResult, _ detail: String, supersededBy: String? = nil) -> Check {
        dropHead(key)
        finish(head, result, supersededBy: supersededBy, detail: detail)
        return .finished
    }

    /// A stopped lane holds its team's requests during the cooldown and while its probe is in
    /// flight, within each request's bounds; `nil` when the team's lane is open.
    mutating func holdForLane(_ head: QueuedRequest, key: String, team: String) -> Check? {
        guard let lane = stoppedLanes[team], lane.probe != nil || lane.until > now else { return nil }
        let request = head.request
        let deadline = policy.retry.deadline(expiration: request.expiration, firstAttempt: head.firstAttemptAt ?? head.enqueuedAt)
        if deadline <= now {
            let refused = "APNs refused \(credentials(of: team)) (\(lane.reason))"
            return request.expiration != nil
                ? drop(head, key: key, .expired, "apns-expiration passed while \(refused)")
                : drop(head, key: key, .failed, "\(refused) and did not accept them again before the request's deadline")
        }
        stoppedLanes[team]?.held.insert(key)
        wake(key, at: lane.probe == nil ? min(lane.until, deadline) : deadline)
        return .held
    }

    /// Takes the activity's first request out of its queue and hands it out to be sent.
    mutating func startSending(_ key: String, recipient: Recipient, team: String, priority: Int, downgraded: Bool) {
        guard var sending = slots[key]?.queue.removeFirst() else { return }
        if stoppedLanes[team] != nil {
            // The cooldown is over: this request probes the lane; the team's others wait for its answer.
            stoppedLanes[team]?.probe = sending.request.requestId
        }
        queued -= 1
        sending.attempts += 1
        sending.firstAttemptAt = sending.firstAttemptAt ?? now
        // Announced (`sending`, persisted before it goes): a push-to-start, every attempt; a push
        // with an alert, its first (and the first after APNs certainly did not take one). The next
        // owner does not start a second activity, and does not alert twice.
        let announces = DispatchEngine.isPushToStart(sending.request) || (sending.request.alerting && !sending.handedOff && !sending.ambiguous)
        if announces {
            sending.handedOff = true
            sending.announcementId = newAnnouncementId()
        }
        slots[key]?.inFlight = sending
        inFlight += 1
        metrics.inFlight(inFlight)
        if sending.request.event != .start, !sending.request.isWidget {
            let timestamp = timestamp(for: sending.request, key: key)
            if timestamp != sending.request.apnsTimestamp, let payload = DispatchEngine.restamped(sending.request.payload, timestamp: timestamp) {
                sending.request.payload = payload
                sending.request.apnsTimestamp = timestamp
                slots[key]?.inFlight = sending
                metrics.restamped()
            }
            raiseFloor(key, sequence: sending.request.contentSequence, requestId: sending.request.requestId, timestamp: sending.request.apnsTimestamp)
        }
        let attempt =
            switch recipient {
            case .token(let record):
                attempt(sending, key: key, record: record, team: team, priority: priority, downgraded: downgraded, announces: announces)
            case .channel(let channel):
                broadcast(sending, key: key, channel: channel, team: team, priority: priority, downgraded: downgraded, announces: announces)
            }
        actions.append(.send(attempt))
    }

    func attempt(
        _ entry: QueuedRequest, key: String, record: DeliveryToken, team: String, priority: Int, downgraded: Bool, announces: Bool = false
    ) -> Attempt {
        let request = entry.request
        let payload = entry.ambiguous && request.alerting ? DispatchEngine.withoutAlert(request.payload) : request.payload
        let push = APNsPush(
            deviceToken: record.token, topic: record.app.bundleId + (request.isWidget ? APNsPush.widgetsSuffix : APNsPush.liveActivitySuffix),
            priority: request.isWidget ? 5 : priority, apnsID: request.requestId,
            expiration: request.expiration.map { Int64($0.timeIntervalSince1970) } ?? 0, payload: ByteBuffer(string: payload))
        let fingerprint = TokenFingerprint.of(token: record.token)
        let announcement: PushOutcome? =
            announces
            ? PushOutcome(
                requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: .sending,
                attempts: entry.attempts, tokenFingerprint: fingerprint,
                detail: DispatchEngine.isPushToStart(request) ? "push-to-start about to be sent" : "a push with an alert about to be sent",
                completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType, channelId: request.channelId,
                contentSequence: request.contentSequence, announcementId: entry.announcementId, deviceId: request.deviceId,
                apnsTimestamp: request.apnsTimestamp)
            : nil
        return Attempt(
            entry: entry, key: key, team: team, push: push, environment: record.app.environment, fingerprint: fingerprint,
            registeredAt: record.registeredAt, priority: priority, downgraded: downgraded, announcement: announcement)
    }

    /// Notes that `key`'s first request waits for a token until `until` (`nil`: it does not wait),
    /// holding `requests` of the queued requests; it is looked at again then.
    mutating func setAwaiting(_ key: String, until: Date?, requests: Int = 0) {
        let previous = awaiting[key]
        awaitingRequests -= previous?.requests ?? 0
        guard let until, requests > 0 else {
            if previous != nil { awaiting[key] = nil }
            return
        }
        if previous == nil, awaiting.count >= policy.maximumAwaitingToken, let oldest = awaiting.min(by: { $0.value.until < $1.value.until })?.key {
            giveUpWaiting(oldest, detail: "more than \(policy.maximumAwaitingToken) activities wait for their token")
        }
        awaiting[key] = (until, requests)
        awaitingRequests += requests
        wake(key, at: until)
        // They do not count against the queue limit, but against this one.
        while awaitingRequests > policy.maximumAwaitingRequests, let first = awaiting.min(by: { $0.value.until < $1.value.until })?.key {
            giveUpWaiting(first, detail: "more than \(policy.maximumAwaitingRequests) requests wait for their token")
        }
    }

    /// Ends every request of `key` that waits for a token (or for a newer one than the invalid
    /// token it has), now.
    mutating func giveUpWaiting(_ key: String, detail: String) {
        setAwaiting(key, until: nil)
        guard slots[key] != nil else { return }
        let result: PushResult = tokens.token(forKey: key) == nil ? .awaitingToken : .tokenInvalid
        let waiting = slots[key]!.queue.removeAll { _ in true }
        queued -= waiting.count
        for entry in waiting { finish(entry, result, detail: detail) }
    }

    mutating func dropHead(_ key: String) {
        guard slots[key] != nil else { return }
        _ = slots[key]!.queue.removeFirst()
        queued -= 1
    }

    /// Looks at `key` again at `date` (unless that is already planned for earlier), and never
    /// at the instant being handled: a budget whose next send is a rounding error away would
    /// otherwise be woken again and again at the same `now`.
    mutating func wake(_ key: String, at requested: Date) {
        let date = max(requested, now.addingTimeInterval(0.001))
        if let scheduled = slots[key]?.wakeAt, scheduled <= date { return }
        slots[key]?.wakeAt = date
        wakeups.insert(Wakeup(at: date, key: key))
    }

    /// A send slot came free: the activities waiting for one go, in the order they became ready.
    mutating func pumpReady() {
        while isAccepting, inFlight < window.limit, let key = ready.popFirst() {
            readySet.remove(key)
            pump(key)
        }
    }

    /// An attempt is over (answered or not): its send slot is free.
    mutating func attemptEnded(_ key: String) {
        inFlight -= 1
        metrics.inFlight(inFlight)
        slots[key]?.inFlight = nil
    }

    /// Hands out the request's one final outcome, to be persisted before its ticket is done.
    mutating func finish(
        _ entry: QueuedRequest, _ result: PushResult, apns: PushOutcome.APNsResponse? = nil, priority: Int? = nil, fingerprint: String? = nil,
        supersededBy: String? = nil, detail: String? = nil
    ) {
        let request = entry.request
        let outcome = PushOutcome(
            requestId: request.requestId, activityId: request.activityId, pushToStartKey: request.pushToStartKey, result: result, apns: apns,
            priorityUsed: apns == nil ? nil : priority, attempts: entry.attempts,
            latencyMilliseconds: apns == nil ? nil : max(0, now.timeIntervalSince(request.createdAt) * 1_000), tokenFingerprint: fingerprint,
            supersededBy: supersededBy, detail: detail, completedAt: now, bundleId: request.app.bundleId, attributesType: request.attributesType,
            // A broadcast's channel; a push-to-start's on a channel, the one it starts the activity on.
            channelId: request.isBroadcast ? request.key.flatMap { channels[$0]?.channelId } : request.channelId, contentSequence: request.contentSequence,
            deviceId: request.deviceId, apnsTimestamp: entry.attempts > 0 && !request.isWidget ? request.apnsTimestamp : nil, widgetKey: request.widgetKey)
        metrics.outcome(result)
        ownFinished.insert(request.requestId)
        let key = request.key
        if let key { finishedByActivity.insert(request.requestId, key: key, now: now) }
        if DispatchEngine.isPushToStart(request) || request.alerting {
            announcedFinished[request.requestId] = now
            announcedFinishedOrder.append((request.requestId, now))
            while let oldest = announcedFinishedOrder.first, now.timeIntervalSince(oldest.at) > Self.finishedHorizon {
                announcedFinishedOrder.removeFirst()
                if announcedFinished[oldest.id] == oldest.at { announcedFinished[oldest.id] = nil }
            }
        }
        persisting[request.requestId] = []
        if let key { forgetIfIdle(key) }
        publishing += 1
        let copies = copies.isEmpty ? [] : (copies.removeValue(forKey: request.requestId) ?? []).map(\.ticket)
        maybeDelivered[entry.partition]?[request.requestId] = nil
        actions.append(.publish(outcome, ticket: entry.ticket, copies: copies))
    }
}
