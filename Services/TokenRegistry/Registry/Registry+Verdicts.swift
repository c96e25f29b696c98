import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// APNs's verdicts: push outcomes that kill a token, and the repair of an invalidation that
// undid a registration this instance had not read yet.
extension Registry {
    /// What a push outcome means for the token it concerns.
    public enum OutcomeDecision: Equatable, Sendable {
        case invalidate(InvalidationReason, since: Date?)
        case ignore(String)
    }

    /// Applies the rule for outcomes: APNs's "this token is dead" (410 Unregistered / ExpiredToken,
    /// 400 BadDeviceToken / DeviceTokenNotForTopic) invalidates the token it was about — unless the
    /// key has another token by now, or the same token was registered again after APNs's verdict
    /// (the 410 `timestamp`, or when the outcome completed).
    ///
    /// content-service's `startUnconfirmed` (a push-to-start APNs accepted, and no update token of
    /// its activity came in time) invalidates the push-to-start token it went to, by the same rule
    /// from the moment it was written: a token the app registered since (a new one, or the same
    /// confirmed again) stands.
    ///
    /// - Parameter startedActivity: for a `startUnconfirmed`, the record of the activity the start
    ///   was to start (``PushOutcome/startActivityId``), when this registry holds one: its update
    ///   token came (content-service's table had not read it yet), the start is confirmed.
    public static func decide(_ outcome: PushOutcome, current: TokenRecord?, startedActivity: TokenRecord? = nil) -> OutcomeDecision {
        if outcome.result == .startUnconfirmed {
            guard let verdict = verdict(outcome) else { return .ignore("startUnconfirmed without a push-to-start key") }
            if startedActivity != nil { return .ignore("the activity's update token came: the start is confirmed") }
            guard let current else { return .ignore("unknown key") }
            guard current.kind == .pushToStart else { return .ignore("not a push-to-start token") }
            guard current.state == .active else { return .ignore("token already \(current.state.rawValue)") }
            guard verdict.kills(fingerprint: TokenFingerprint.of(token: current.token), registeredAt: current.registeredAt) else {
                return .ignore("the push-to-start token was registered again after the start")
            }
            return .invalidate(.startUnconfirmed, since: nil)
        }
        guard outcome.result == .tokenInvalid else { return .ignore("not a token verdict") }
        guard let apns = outcome.apns else { return .ignore("APNs was not asked") }
        guard let verdict = TokenVerdict(outcome) else {
            return .ignore("APNs answer \(apns.status) \(apns.reason ?? "") does not invalidate a token")
        }
        guard let current else { return .ignore("unknown key") }
        guard current.state == .active else { return .ignore("token already \(current.state.rawValue)") }
        let fingerprint = TokenFingerprint.of(token: current.token)
        if let dead = verdict.fingerprint, dead != fingerprint {
            return .ignore("the outcome concerns an earlier token of this key")
        }
        // The one rule (TokenVerdict), as content-service and apns-dispatcher apply it.
        guard verdict.kills(fingerprint: fingerprint, registeredAt: current.registeredAt) else {
            return .ignore("the token was registered again after APNs's verdict")
        }
        return .invalidate(verdict.reason, since: apns.timestamp)
    }

    /// The verdict an outcome carries on its token: APNs's (``TokenVerdict``), or content-service's
    /// `startUnconfirmed` on a push-to-start token (since when it was written).
    static func verdict(_ outcome: PushOutcome) -> TokenVerdict? {
        if outcome.result == .startUnconfirmed {
            guard outcome.pushToStartKey != nil else { return nil }
            return TokenVerdict(reason: .startUnconfirmed, fingerprint: outcome.tokenFingerprint, since: outcome.completedAt)
        }
        return TokenVerdict(outcome)
    }

    /// Acts on one push outcome; returns what was decided. Throws only if the invalidation could
    /// not be persisted (the outcome is then read again).
    @discardableResult
    public func handle(_ outcome: PushOutcome) async throws -> OutcomeDecision {
        guard outcome.result == .tokenInvalid || outcome.result == .startUnconfirmed, var key = outcome.key else {
            metrics.outcome("ignored")
            return .ignore("not a token verdict")
        }
        if let activityId = outcome.activityId, outcome.bundleId == nil {
            // Written before outcomes named their app: the activity of the only app that has the id.
            let keys = table.keys(forActivity: activityId)
            guard keys.count == 1 else {
                metrics.outcome("ignored")
                return .ignore(keys.isEmpty ? "unknown key" : "an outcome without its app, for an id registered in several apps")
            }
            key = keys[0]
        }
        let logger = self.logger
        let decision = try await locks.withLock(key) { [key] () async throws -> OutcomeDecision in
            let current = self.table.record(forKey: key)
            // The activity's record counts only when it is the same user's, from the same device when
            // it names one (another user's id, or an earlier life of the id, confirms nothing).
            let startedActivity = outcome.startActivityId.flatMap { activityId in
                outcome.bundleId.flatMap { self.table.record(forKey: MessageKey.activity(bundleId: $0, activityId: activityId)) }
            }.flatMap { activity -> TokenRecord? in
                guard let current, activity.userId == current.userId, activity.deviceId == nil || activity.deviceId == current.deviceId else { return nil }
                return activity
            }
            let decision = Self.decide(outcome, current: current, startedActivity: startedActivity)
            guard case .invalidate(let reason, let since) = decision, let current else { return decision }
            let next = try await self.writeInvalidation(
                of: current, key: key, reason: reason, since: since, verdict: Self.verdict(outcome),
                startActivityId: reason == .startUnconfirmed ? outcome.startActivityId : nil)
            logger.info(
                reason == .startUnconfirmed ? "push-to-start token invalidated: a start on it was not confirmed (it may be stale)" : "token invalidated by APNs's answer",
                metadata: ["token.key": "\(key)", "token.fingerprint": "\(TokenFingerprint.of(token: next.token))", "token.reason": "\(reason)"])
            return decision
        }
        // (Whatever the first key's decision: an outcome read again after a sibling's write failed
        // finds the first key invalidated already, and the siblings still owed.)
        try await invalidateWidgetSiblings(of: key, outcome)
        if case .ignore(let why) = decision {
            metrics.outcome("ignored")
            logger.debug("push outcome ignored", metadata: ["token.key": "\(key)", "outcome.why": "\(why)"])
        } else {
            metrics.outcome("invalidated")
        }
        return decision
    }

    /// A device has one widget token for all its widget kinds: APNs's verdict on it under one kind
    /// holds for the same token under the others (each would otherwise spend a push and the
    /// device's widget budget to learn it again). Each such record of the same environment the
    /// verdict kills is invalidated too, one at a time after the first key's lock is released, and
    /// noted as this instance's own invalidation: one that undid a registration this instance had
    /// not read yet is repaired like the first key's (``readBehind(_:key:at:)``).
    private func invalidateWidgetSiblings(of key: String, _ outcome: PushOutcome) async throws {
        guard outcome.widgetKey != nil, outcome.result == .tokenInvalid, let verdict = Self.verdict(outcome), let dead = verdict.fingerprint,
            let environment = table.record(forKey: key)?.app.environment
        else { return }
        let (reason, since) = (verdict.reason, outcome.apns?.timestamp)
        for sibling in table.widgetSiblings(of: key) {
            try await locks.withLock(sibling) { () async throws in
                guard let current = self.table.record(forKey: sibling), current.state == .active, current.app.environment == environment,
                    TokenFingerprint.of(token: current.token) == dead, verdict.kills(fingerprint: dead, registeredAt: current.registeredAt)
                else { return }
                _ = try await self.writeInvalidation(of: current, key: sibling, reason: reason, since: since, verdict: verdict)
            }
        }
    }

    /// Under `key`'s lock: writes `current` invalidated for `reason`, applies it once acknowledged,
    /// and notes it as this instance's own invalidation by `verdict` (the repair of a registration
    /// it undid, ``readBehind(_:key:at:)``); returns the record written.
    private func writeInvalidation(
        of current: TokenRecord, key: String, reason: InvalidationReason, since: Date?, verdict: TokenVerdict?, startActivityId: String? = nil
    ) async throws -> TokenRecord {
        let now = self.now()
        var next = current
        next.state = .invalidated
        next.invalidation = .init(reason: reason, invalidatedAt: now, apnsTimestamp: since, startActivityId: startActivityId)
        next.updatedAt = now
        let legacyKey = table.legacyTopicKey(forKey: key)
        let position = try await publisher.publish(next)
        await apply(next, key: key, at: position, replacing: legacyKey)
        if let position, let verdict { ownInvalidations.withLock { $0.wrote(key, at: position, note: verdict, now: now) } }
        metrics.invalidated(reason)
        metrics.changed(next.kind, .invalidated)
        return next
    }

    /// A record of `key` read from the topic at `position` that the table did not take (it holds a
    /// later one, or the same). Records before this instance's own invalidation of the key are
    /// noted, the last of them standing; when the reader reaches the invalidation itself, that
    /// last record decides: if it is an active record the invalidation's verdict does not kill
    /// (another instance confirmed the token after APNs's verdict, or rotated it), the
    /// invalidation — decided from a table that had not read it — undid it by mistake, and it is
    /// written again, after the invalidation (Kafka has no compare-and-set: the writer that erred
    /// repairs). An end, another invalidation, or a registration the verdict kills stands.
    @discardableResult
    func readBehind(_ record: TokenRecord, key: String, at position: TokenTable.Position) -> Task<Void, Never>? {
        // The reader reached the invalidation: decided once.
        guard let mine = ownInvalidations.withLock({ $0.read(record, key: key, at: position) }), let (record, _) = mine.behind,
            record.state == .active, !mine.note.kills(fingerprint: TokenFingerprint.of(token: record.token), registeredAt: record.registeredAt)
        else { return nil }
        let invalidation = mine.position
        let logger = self.logger
        return Task {
            do {
                try await self.restore(record, key: key, over: invalidation)
            } catch {
                logger.error("a registration an invalidation undid could not be written again", metadata: ["token.key": "\(key)", "error": "\(error)"])
            }
        }
    }

    private func restore(_ record: TokenRecord, key: String, over invalidation: TokenTable.Position) async throws {
        try await locks.withLock(key) { () async throws -> Void in
            // Only over the invalidation that undid it: a record read since decides for itself.
            guard let current = self.table.record(forKey: key), current.state == .invalidated, self.table.position(forKey: key) == invalidation
            else { return }
            var again = record
            again.updatedAt = self.now()
            let legacyKey = self.table.legacyTopicKey(forKey: key)
            let position = try await self.publisher.publish(again)
            await self.apply(again, key: key, at: position, replacing: legacyKey)
            self.metrics.changed(again.kind, .reactivated)
            self.logger.notice(
                "a registration made just before this instance's invalidation, which had not seen it, is written again",
                metadata: ["token.key": "\(key)", "token.fingerprint": "\(TokenFingerprint.of(token: again.token))"])
        }
    }

    /// The table as the reader of `islet.tokens.v1` feeds it (``TokenTableLoader``): records go to
    /// the table, and one it does not take is looked at (``readBehind(_:key:at:)``).
    public var topicFeed: some TokenTopicTable { RegistryTopicFeed(registry: self) }
}
