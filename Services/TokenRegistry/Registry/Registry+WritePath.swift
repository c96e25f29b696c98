import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// The write path: every change is published to `islet.tokens.v1` and applied to the table once
// Kafka acknowledged it; the sweep deletes what ended long ago.
extension Registry {
    /// ``write(key:_:)`` for a registration of `user`: one of the user's registrations at a time (on
    /// this instance), and refused (429 `quotaExceeded`) when it would make one token of `kind`
    /// more active than the user's quota allows.
    func register(
        user: String, kind: TokenKind, key: String, _ decide: @escaping @Sendable (TokenRecord?, Date) throws(APIError) -> (TokenRecord, Change)
    ) async throws(APIError) -> WriteResponse {
        let (table, limit) = (self.table, kind == .update ? quotas.liveActivities : quotas.pushToStart)
        let what =
            switch kind {
            case .update: "live activities (the most allowed): end one first"
            case .widget: "widget tokens (the most allowed): invalidate one first"
            default: "push-to-start tokens (the most allowed): invalidate one first"
            }
        // Serialised per user, so that registrations in parallel cannot pass the quota together.
        return try await locks.withLock("user:" + user) { () async throws(APIError) -> WriteResponse in
            try await self.write(key: key) { current, now throws(APIError) in
                // The user gains an active token unless the key already holds one of theirs.
                // (Another device's record of an activity the user has active adds no activity.)
                if current?.state != .active || current?.userId != user, limit > 0, table.activeCount(ofUser: user, kind: kind) >= limit,
                    kind != .update || !table.hasOtherActiveRecord(ofActivityOf: key, user: user)
                {
                    throw APIError(
                        .tooManyRequests, .quotaExceeded, field: kind == .update ? "activityId" : "deviceId",
                        reason: "this user already has \(limit) \(what)")
                }
                return try decide(current, now)
            }
        }
    }

    /// Under the key's lock: reads its record, lets `decide` say what to write, publishes it and
    /// applies it once acknowledged. `decide` returning `.unchanged` writes nothing.
    func write(
        key: String, _ decide: @Sendable (TokenRecord?, Date) throws(APIError) -> (TokenRecord, Change)
    ) async throws(APIError) -> WriteResponse {
        try requireReady()
        let (publisher, table, logger, metrics, now) = (self.publisher, self.table, self.logger, self.metrics, self.now)
        return try await locks.withLock(key) { () async throws(APIError) -> WriteResponse in
            let (next, change) = try decide(table.record(forKey: key), now())
            guard change != .unchanged else { return WriteResponse(change: change, token: TokenStateView(next)) }
            // Read before the write: once it is acknowledged, the table's loader may apply it first.
            let legacyKey = table.legacyTopicKey(forKey: key)
            let position: TokenTable.Position?
            do {
                position = try await publisher.publish(next)
            } catch {
                logger.warning("token change not acknowledged by Kafka", metadata: ["token.key": "\(key)", "kafka.error": "\(error)"])
                throw APIError(
                    .serviceUnavailable, .unavailable,
                    reason: "the change was not acknowledged by Kafka and is not confirmed; retry (repeating it is safe)")
            }
            if change == .registered, next.kind == .update, next.deviceKeyed != true, self.quotas.devicesPerActivity > 1, let position {
                // An activity's own record registered over nothing this table held: another
                // instance's registration of it may land just before (readBehindRegistration).
                self.noteOwnRegistration(next, key: key, at: position)
            } else {
                await self.apply(next, key: key, at: position, replacing: legacyKey)
            }
            metrics.changed(next.kind, change)
            if change == .invalidated, let reason = next.invalidation?.reason { metrics.invalidated(reason) }
            logger.debug(
                "token changed",
                metadata: ["token.key": "\(key)", "token.change": "\(change.rawValue)", "token.fingerprint": "\(TokenFingerprint.of(token: next.token))"])
            return WriteResponse(change: change, token: TokenStateView(next))
        }
    }

    /// Notes an own registration (``ownRegistrations``) and applies it; a record of the key the
    /// table took between the decision and now — read from the topic before it — is the one before it.
    private func noteOwnRegistration(_ record: TokenRecord, key: String, at position: TokenTable.Position) {
        let date = now()
        ownRegistrations.withLock { $0.wrote(key, at: position, note: (), now: date) }
        let (_, replaced) = table.applyReplacing(record, key: key, at: position)
        if let replaced, let before = replaced.position, before.partition == position.partition, before.offset < position.offset {
            readBehindRegistration(replaced.record, key: key, at: before)
        }
    }

    /// Applies a record Kafka acknowledged under `key` to the table. When the record it replaces
    /// was under the bare activity id on the topic (`legacyKey`: written before ids were scoped
    /// per app), that key is deleted from the topic, or compaction would keep the old record for
    /// ever. A reader that meets the old record keeps the newer one (same partition, later
    /// offset); a tombstone Kafka refuses is tried again by the next ``sweep(invalidatedFor:)``.
    func apply(_ record: TokenRecord, key: String, at position: TokenTable.Position?, replacing legacyKey: String?) async {
        table.apply(record, key: key, at: position)
        guard let legacyKey else { return }
        await deleteLegacyKey(legacyKey)
    }

    private func deleteLegacyKey(_ legacyKey: String) async {
        do {
            _ = try await publisher.tombstone(key: legacyKey)
            pendingLegacyKeys.withLock { _ = $0.remove(legacyKey) }
        } catch {
            pendingLegacyKeys.withLock { _ = $0.insert(legacyKey) }
            logger.warning(
                "the unscoped key of a replaced record was not deleted: the next sweep tries again",
                metadata: ["token.key": "\(legacyKey)", "kafka.error": "\(error)"])
        }
    }

    /// Deletes from `islet.tokens.v1` (a tombstone) every record invalidated more than `retention`
    /// ago, so that the table of every service stays the size of what is alive. Each key is
    /// checked again under its lock (a re-registration since wins). Returns how many were deleted;
    /// a tombstone Kafka does not acknowledge is left for the next sweep.
    public func sweep(invalidatedFor retention: Duration) async -> Int {
        guard isReady else { return 0 }
        for legacyKey in pendingLegacyKeys.withLock({ $0 }) { await deleteLegacyKey(legacyKey) }
        guard retention > .zero else { return 0 }
        let cutoff = now().addingTimeInterval(-(retention / .seconds(1)))
        var deleted = 0
        for key in table.keys(invalidatedBefore: cutoff) {
            let (publisher, table, logger) = (self.publisher, self.table, self.logger)
            let done = await locks.withLock(key) { () async -> Bool in
                guard let record = table.record(forKey: key), record.state == .invalidated,
                    let at = record.invalidation?.invalidatedAt, at < cutoff
                else { return false }
                do {
                    // A record still under its old, unscoped key is deleted under that key.
                    let topicKey = table.legacyTopicKey(forKey: key) ?? key
                    let position = try await publisher.tombstone(key: topicKey)
                    table.remove(key: topicKey, at: position)
                    return true
                } catch {
                    logger.warning("tombstone not acknowledged by Kafka: the next sweep tries again", metadata: ["token.key": "\(key)", "kafka.error": "\(error)"])
                    return false
                }
            }
            if done { deleted += 1 }
        }
        if deleted > 0 { logger.info("ended tokens deleted from the topic", metadata: ["count": "\(deleted)", "retention": "\(retention)"]) }
        return deleted
    }
}
