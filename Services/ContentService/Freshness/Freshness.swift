import Foundation
import IsletMessages

/// How current an activity's content on the phone is.
public enum Freshness: String, Sendable, CaseIterable {
    /// Delivered (or on its way) and before its stale date.
    case fresh
    /// Past its stale date, or its delivery failed: the latest content is sent again.
    case staleRecoverable
    /// Stale for longer than the policy allows: the activity is ended with its final content.
    case severelyStale
}

extension ActivityMemory {
    /// Whether the service still sends to this activity: started or updated, not ended, token alive.
    var isLive: Bool { latest != nil && !ended && !gone }

    /// Since when the content on the phone is out of date (`nil`: it is not, or the activity is not live).
    func staleSince(now: Date) -> Date? {
        guard isLive, let latest else { return nil }
        if let result = latestOutcome, result == .failed || result == .expired { return latest.createdAt }
        let staleDate = Self.staleDate(of: latest)
        return now >= staleDate ? staleDate : nil
    }

    /// When the content of a request goes out of date: its stale date, else 180 s after it was made.
    static func staleDate(of request: LatestRequest) -> Date { request.staleDate ?? request.createdAt.addingTimeInterval(180) }

    func freshness(now: Date, policy: FreshnessPolicy) -> Freshness? {
        guard isLive else { return nil }
        guard let since = staleSince(now: now) else { return .fresh }
        return now.timeIntervalSince(since) >= policy.severeAfter / .seconds(1) ? .severelyStale : .staleRecoverable
    }

    /// The next moment time alone may change what the monitor makes of the activity (``ContentEngine/sweep(owned:)``):
    /// its content goes stale (its stale date), may be sent again (the end of the resend spacing),
    /// turns severely stale (`severeAfter` after it went stale), its lifetime ends, or, not live,
    /// it is to be forgotten (the retention after its latest request). At or before `now`: the
    /// monitor has something to do now. `nil`: nothing to look at (no content).
    ///
    /// Never later than such a moment; a little earlier (``deadlineMargin``), as the rules compare
    /// durations and this adds them to dates (the two may round apart): looked at a little early,
    /// the activity is only scheduled again. An activity whose token is dead has no deadline but
    /// its retention: it is revived by a token registered again, which no clock tells.
    func nextDeadline(now: Date, policy: FreshnessPolicy) -> Date? {
        guard let latest else { return nil }
        guard isLive else { return latest.createdAt.addingTimeInterval(policy.retention / .seconds(1) - Self.deadlineMargin) }
        var due = startedAt.map { $0.addingTimeInterval(policy.lifetime / .seconds(1)) } ?? .distantFuture
        if let since = staleSince(now: now) {
            due = min(due, since.addingTimeInterval(policy.severeAfter / .seconds(1)))
            // Re-sends left: the next once the spacing after the last one passed (at once for the first).
            if resends < policy.maximumResends {
                due = min(due, lastResendAt.map { $0.addingTimeInterval(policy.resendSpacing / .seconds(1)) } ?? since)
            }
        } else {
            due = min(due, Self.staleDate(of: latest))
        }
        // A delivered push-to-start not yet confirmed by the activity's update token: its watchdog.
        if let watch = startWatch, watch.reportedAt == nil {
            due = min(due, watch.deliveredAt.addingTimeInterval(policy.startConfirmation / .seconds(1)))
        }
        return due.addingTimeInterval(-Self.deadlineMargin)
    }

    /// How much earlier than its moment an activity is looked at (``nextDeadline(now:policy:)``).
    static let deadlineMargin: TimeInterval = 0.001
}

extension PayloadAssembler {
    /// A request the service sends by itself after `latest`: its content again as an update (a
    /// re-send, at priority 10, with a new stale date and no alert), or as the activity's `end`.
    /// `nil` when the rewritten payload would not fit (it never grows by more than a few bytes).
    func followUp(
        _ kind: FollowUp, of latest: PushRequest, requestId: String, timestamp: Int64, now: Date, tokenRegisteredAt: Date? = nil
    ) -> PushRequest? {
        guard case .object(var body)? = try? IsletJSON.decodeValue(JSONValue.self, from: Array(latest.payload.utf8)),
            case .object(var aps)? = body["aps"]
        else { return nil }
        // The content as it is, as an update or end of the running activity (never a second start).
        for key in ["alert", "attributes-type", "attributes", "input-push-token", "input-push-channel", "dismissal-date"] { aps[key] = nil }
        let staleAfter = latest.staleDate.map { max(60, $0.timeIntervalSince(latest.createdAt)) } ?? 180
        let staleDate = now.addingTimeInterval(staleAfter)
        aps["timestamp"] = .integer(timestamp)
        aps["stale-date"] = .integer(Int64(staleDate.timeIntervalSince1970.rounded(.up)))
        let event: ActivityEventKind
        switch kind {
        case .resend:
            event = .update
        case .end:
            event = .end
            if let dismissal = policy.dismissalDate(now: now) { aps["dismissal-date"] = .integer(dismissal) }
        }
        aps["event"] = .string(event.rawValue)
        body["aps"] = .object(aps)
        let payload = Self.encode(body)
        guard payload.utf8.count <= PushRequest.maximumPayloadBytes else { return nil }
        return PushRequest(
            requestId: requestId, activityId: latest.sourceActivityId ?? latest.activityId, event: event, app: latest.app,
            attributesType: latest.attributesType, payload: payload, priority: 10, urgency: .important, supersedable: event == .update,
            alerting: false, apnsTimestamp: timestamp, contentSequence: latest.contentSequence, staleDate: staleDate,
            expiration: event == .update ? staleDate : now.addingTimeInterval(3_600), createdAt: now, sourceEventId: nil,
            sourceActivityId: latest.sourceActivityId ?? latest.activityId, state: latest.state, channelStoragePolicy: latest.channelStoragePolicy,
            tokenRegisteredAt: tokenRegisteredAt)
    }
}
