import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

/// The registry's rules: who may change which token, what each request writes, and when a
/// push outcome kills a token. Every change is published to `islet.tokens.v1` and applied to the
/// table only once Kafka acknowledged it; a request that changes nothing writes nothing.
public final class Registry: Sendable {
    /// How many active tokens one user may hold (0: no limit): what one account can make every
    /// service keep in memory.
    public struct Quotas: Sendable, Equatable {
        /// Live activities (update tokens). Default 1000.
        public var liveActivities: Int
        /// Push-to-start tokens (one per device and attributes type). Default 100.
        public var pushToStart: Int
        public init(liveActivities: Int = 1_000, pushToStart: Int = 100) {
            self.liveActivities = liveActivities
            self.pushToStart = pushToStart
        }
    }

    public let table: TokenTable
    private let quotas: Quotas
    /// The apps served (``RegistrySettings/apps``); empty: any.
    private let apps: Set<String>
    private let tickets: ActivityTickets?
    private let publisher: any TokenRecordPublisher
    private let locks = KeyedLocks()
    private let clock: any WallClock
    private let logger: Logger
    private let metrics = RegistryMetrics()
    private let loaded = Atomic<Bool>(false)
    /// Unscoped topic keys whose records were replaced under their app's key, and whose tombstone
    /// Kafka refused: the next sweep deletes them.
    private let pendingLegacyKeys = Mutex(Set<String>())
    /// Invalidations this instance wrote, by key: where each landed, the verdict it applied, when,
    /// and the last record of the key its reader has read before it on the topic since. Another
    /// instance may have written the key just before (a confirmation, a rotation), unseen by this
    /// one's table (its reader lags the topic): when the reader reaches the invalidation, that last
    /// record decides (``readBehind(_:key:at:)``). Kept 10 minutes.
    private let ownInvalidations = Mutex<[String: OwnInvalidation]>([:])

    struct OwnInvalidation {
        var position: TokenTable.Position
        var verdict: TokenVerdict
        var at: Date
        var behind: (record: TokenRecord, position: TokenTable.Position)?
    }

    /// `tickets`: verifies the activity tickets of registrations (`nil`: none configured; a
    /// registration that sends one is refused).
    public init(
        table: TokenTable, publisher: any TokenRecordPublisher, logger: Logger, quotas: Quotas = Quotas(),
        tickets: ActivityTickets? = nil, apps: Set<String> = [], clock: any WallClock = SystemWallClock()
    ) {
        self.table = table
        self.quotas = quotas
        self.apps = apps
        self.tickets = tickets
        self.publisher = publisher
        self.logger = logger
        self.clock = clock
    }

    /// Now, at the wire's precision (milliseconds), so that the table holds exactly what a rebuild
    /// from the topic reads back.
    private func now() -> Date {
        let date = clock.date
        return IsletDate.parse(IsletDate.format(date)) ?? date
    }

    /// Whether the table holds everything the topic held at start-up. Until then every API call
    /// is answered 503: an ownership check against a half-built table could be wrong.
    public var isReady: Bool { loaded.load(ordering: .acquiring) }

    public func markReady() { loaded.store(true, ordering: .releasing) }

    // MARK: The app's calls

    /// Registers or rotates the update token of `activityId` for `user`. Who owns the activity:
    /// the user whose registration carried a valid ticket from its backend (``ActivityTickets``);
    /// without tickets, the first user to register the id. A ticketed registration replaces another
    /// user's unticketed one (`claimed`: a squatter's token is never used again); a verified
    /// owner's activity is refused (403) to everyone else.
    public func registerActivityToken(user: String, activityId: String, _ request: RegisterActivityTokenRequest) async throws(APIError)
        -> WriteResponse
    {
        let activityId = try Validation.identifier(activityId, field: "activityId")
        let request = try Validation.activityToken(request, now: now())
        try requireServed(request.app.bundleId, field: "app.bundleId")
        let (token, attributesType, app, appVersion) = (request.token, request.attributesType, request.app, request.appVersion)
        let (startedAt, deviceId) = (request.activityStartedAt, request.deviceId)
        if let deviceId, let owner = table.owner(bundleId: request.app.bundleId, deviceId: deviceId), owner != user {
            throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
        }
        let verified = try await verifyTicket(request.ticket, user: user, activityId: activityId, bundleId: app.bundleId)
        let logger = self.logger

        return try await register(user: user, kind: .update, key: MessageKey.activity(bundleId: app.bundleId, activityId: activityId)) {
            current, now throws(APIError) in
            let fresh = TokenRecord(
                kind: .update, activityId: activityId, deviceId: deviceId, userId: user, token: token, app: app,
                attributesType: attributesType, frequentUpdatesEnabled: request.frequentUpdatesEnabled, appVersion: appVersion,
                state: .active, activityStartedAt: startedAt, registeredAt: now, updatedAt: now, ownerVerified: verified ? true : nil,
                locale: request.locale)
            guard let current else { return (fresh, .registered) }
            guard current.userId == user else {
                if verified && current.ownerVerified != true {
                    // The first registration was another user's, without proof: the owner's replaces it.
                    logger.notice(
                        "an activity's verified owner replaced another user's unticketed registration",
                        metadata: ["activity.id": "\(activityId)", "token.fingerprint": "\(TokenFingerprint.of(token: current.token))"])
                    return (fresh, .claimed)
                }
                throw APIError(
                    .forbidden, .forbidden, field: "activityId",
                    reason: current.ownerVerified == true
                        ? "the activity belongs to another user" : "the activity belongs to another user (its owner's ticket would prove otherwise)")
            }
            guard current.attributesType == attributesType else {
                throw APIError(.conflict, .conflict, field: "attributesType", reason: "an activity keeps the attributes type it was registered with")
            }
            if current.state == .invalidated, let reason = current.invalidation?.reason, !reason.isFromAPNs {
                throw APIError(.conflict, .conflict, field: "activityId", reason: "the activity has ended (\(reason.rawValue)): start a new one")
            }
            var next = current
            next.token = token
            next.app = app
            next.frequentUpdatesEnabled = request.frequentUpdatesEnabled
            next.appVersion = appVersion
            next.activityStartedAt = startedAt ?? current.activityStartedAt
            next.deviceId = deviceId ?? current.deviceId
            next.locale = request.locale ?? current.locale
            if verified { next.ownerVerified = true }
            return Self.reregistration(of: current, as: next, now: now)
        }
    }

    /// Whether `ticket` proves `user` owns the activity: `false` when there is none (and none is
    /// required); a 403 when it does not verify or one is required and missing; a 400 when the
    /// registry verifies no tickets.
    private func verifyTicket(_ ticket: String?, user: String, activityId: String, bundleId: String) async throws(APIError) -> Bool {
        guard let ticket else {
            if tickets?.required == true {
                throw APIError(
                    .forbidden, .forbidden, field: "ticket",
                    reason: "a ticket from the activity's backend is required to register its token (ISLET_TICKETS_REQUIRED)")
            }
            return false
        }
        guard let tickets else {
            throw APIError.invalid("ticket", "this registry verifies no tickets (ISLET_TICKET_HS256_KEYS is not set)")
        }
        try await tickets.verify(ticket, user: user, activityId: activityId, bundleId: bundleId)
        return true
    }

    public func registerPushToStartToken(
        user: String, bundleId: String, deviceId: String, attributesType: String, _ request: RegisterPushToStartTokenRequest
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType)
        try requireServed(bundleId, field: "bundleId")
        let request = try Validation.pushToStartToken(request)
        let (token, environment, appVersion) = (request.token, request.environment, request.appVersion)
        if let owner = table.owner(bundleId: bundleId, deviceId: deviceId), owner != user {
            throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
        }
        return try await register(user: user, kind: .pushToStart, key: key) { current, now throws(APIError) in
            let app = AppTarget(bundleId: bundleId, environment: environment)
            guard let current else {
                return (
                    TokenRecord(
                        kind: .pushToStart, deviceId: deviceId, userId: user, token: token, app: app, attributesType: attributesType,
                        frequentUpdatesEnabled: request.frequentUpdatesEnabled, appVersion: appVersion, state: .active, registeredAt: now,
                        updatedAt: now, locale: request.locale),
                    .registered
                )
            }
            guard current.userId == user else {
                throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
            }
            var next = current
            next.token = token
            next.app = app
            next.frequentUpdatesEnabled = request.frequentUpdatesEnabled
            next.appVersion = appVersion
            next.locale = request.locale ?? current.locale
            return Self.reregistration(of: current, as: next, now: now)
        }
    }

    /// The app says the activity ended (or was dismissed, or cannot be shown). Repeating it changes nothing.
    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func invalidateActivity(
        user: String, activityId: String, bundleId: String? = nil, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        try requireReady()
        let key = try activityKey(activityId, bundleId: bundleId, user: user)
        return try await invalidate(user: user, key: key, reason: try Validation.clientReason(reason))
    }

    /// The app says a push-to-start token must not be used any more.
    public func invalidatePushToStart(
        user: String, bundleId: String, deviceId: String, attributesType: String, reason: InvalidationReason
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType)
        return try await invalidate(user: user, key: key, reason: try Validation.clientReason(reason))
    }

    /// The app's view of one of its activities.
    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func activity(user: String, activityId: String, bundleId: String? = nil) throws(APIError) -> TokenStateView {
        try requireReady()
        return try view(user: user, key: try activityKey(activityId, bundleId: bundleId, user: user))
    }

    /// The key of an activity: of `bundleId`'s app when given; otherwise of the only app in which
    /// the id is registered — `user`'s activities only when a user asks (another user's are not
    /// revealed to exist: 404), every app's for a backend. An id in several apps needs the app
    /// named: 409 `conflict` on field `bundleId`.
    public func activityKey(_ activityId: String, bundleId: String?, user: String?) throws(APIError) -> String {
        let activityId = try Validation.identifier(activityId, field: "activityId")
        if let bundleId {
            return MessageKey.activity(bundleId: try Validation.bundleId(bundleId, field: "bundleId"), activityId: activityId)
        }
        let table = self.table
        let keys = table.keys(forActivity: activityId).filter { key in user == nil || table.record(forKey: key)?.userId == user }
        switch keys.count {
        case 0: throw APIError.notFound
        case 1: return keys[0]
        default:
            let apps = keys.compactMap { table.record(forKey: $0)?.app.bundleId }
            throw APIError(
                .conflict, .conflict, field: "bundleId",
                reason: "the activity id is registered in several apps (\(apps.joined(separator: ", "))): name the app with bundleId")
        }
    }

    /// The app's view of one of its push-to-start tokens.
    public func pushToStart(user: String, bundleId: String, deviceId: String, attributesType: String) throws(APIError) -> TokenStateView {
        try view(user: user, key: try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType))
    }

    static func pushToStartKey(bundleId: String, deviceId: String, attributesType: String) throws(APIError) -> String {
        MessageKey.pushToStart(
            bundleId: try Validation.bundleId(bundleId, field: "bundleId"), deviceId: try Validation.identifier(deviceId, field: "deviceId"),
            attributesType: try Validation.attributesType(attributesType))
    }

    /// Invalidates the token of `key` for `reason`; `user`, when given, must own it. Repeating it changes nothing.
    public func invalidate(user: String?, key: String, reason: InvalidationReason) async throws(APIError) -> WriteResponse {
        try await write(key: key) { current, now throws(APIError) in
            guard let current, user == nil || current.userId == user else { throw APIError.notFound }
            guard current.state != .invalidated else { return (current, .unchanged) }
            var next = current
            next.state = .invalidated
            next.invalidation = .init(reason: reason, invalidatedAt: now)
            next.updatedAt = now
            return (next, .invalidated)
        }
    }

    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func setFrequentUpdates(user: String, activityId: String, bundleId: String? = nil, enabled: Bool) async throws(APIError)
        -> WriteResponse
    {
        try requireReady()
        let key = try activityKey(activityId, bundleId: bundleId, user: user)
        return try await write(key: key) { current, now throws(APIError) in
            guard let current, current.userId == user else { throw APIError.notFound }
            guard current.frequentUpdatesEnabled != enabled else { return (current, .unchanged) }
            var next = current
            next.frequentUpdatesEnabled = enabled
            next.updatedAt = now
            return (next, .updated)
        }
    }

    /// A user's own token by key, or 404 (another user's token is not revealed to exist).
    func view(user: String, key: String) throws(APIError) -> TokenStateView {
        try requireReady()
        guard let record = table.record(forKey: key), record.userId == user else { throw APIError.notFound }
        return TokenStateView(record)
    }

    // MARK: APNs's verdicts

    /// What a push outcome means for the token it concerns.
    public enum OutcomeDecision: Equatable, Sendable {
        case invalidate(InvalidationReason, since: Date?)
        case ignore(String)
    }

    /// Applies the rule for outcomes: APNs's "this token is dead" (410 Unregistered / ExpiredToken,
    /// 400 BadDeviceToken / DeviceTokenNotForTopic) invalidates the token it was about — unless the
    /// key has another token by now, or the same token was registered again after APNs's verdict
    /// (the 410 `timestamp`, or when the outcome completed).
    public static func decide(_ outcome: PushOutcome, current: TokenRecord?) -> OutcomeDecision {
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

    /// Acts on one push outcome; returns what was decided. Throws only if the invalidation could
    /// not be persisted (the outcome is then read again).
    @discardableResult
    public func handle(_ outcome: PushOutcome) async throws -> OutcomeDecision {
        guard outcome.result == .tokenInvalid, var key = outcome.key else {
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
            let decision = Self.decide(outcome, current: current)
            guard case .invalidate(let reason, let since) = decision, var next = current else { return decision }
            let now = self.now()
            next.state = .invalidated
            next.invalidation = .init(reason: reason, invalidatedAt: now, apnsTimestamp: since)
            next.updatedAt = now
            let legacyKey = self.table.legacyTopicKey(forKey: key)
            let position = try await self.publisher.publish(next)
            await self.apply(next, key: key, at: position, replacing: legacyKey)
            if let position, let verdict = TokenVerdict(outcome) {
                self.ownInvalidations.withLock { own in
                    own = own.filter { now.timeIntervalSince($0.value.at) < 600 }
                    own[key] = OwnInvalidation(position: position, verdict: verdict, at: now)
                }
            }
            self.metrics.invalidated(reason)
            self.metrics.changed(next.kind, .invalidated)
            logger.info(
                "token invalidated by APNs's answer",
                metadata: ["token.key": "\(key)", "token.fingerprint": "\(TokenFingerprint.of(token: next.token))", "token.reason": "\(reason)"])
            return decision
        }
        if case .ignore(let why) = decision {
            metrics.outcome("ignored")
            logger.debug("push outcome ignored", metadata: ["token.key": "\(key)", "outcome.why": "\(why)"])
        } else {
            metrics.outcome("invalidated")
        }
        return decision
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
        let decision = ownInvalidations.withLock { own -> (TokenRecord, TokenTable.Position)? in
            guard var mine = own[key], mine.position.partition == position.partition else { return nil }
            if position.offset < mine.position.offset {
                if (mine.behind?.position.offset ?? .min) < position.offset { mine.behind = (record, position) }
                own[key] = mine
                return nil
            }
            guard position == mine.position else { return nil }
            // The reader reached the invalidation: decided once.
            own[key] = nil
            guard let (last, _) = mine.behind, last.state == .active,
                !mine.verdict.kills(fingerprint: TokenFingerprint.of(token: last.token), registeredAt: last.registeredAt)
            else { return nil }
            return (last, mine.position)
        }
        guard let (record, invalidation) = decision else { return nil }
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

    // MARK: The write path

    /// A registration is for one of the apps this registry serves (any, when none are configured).
    private func requireServed(_ bundleId: String, field: String) throws(APIError) {
        guard apps.isEmpty || apps.contains(bundleId) else {
            throw APIError.invalid(field, "is not an app this registry serves (ISLET_APPS)")
        }
    }

    private func requireReady() throws(APIError) {
        guard isReady else {
            throw APIError(.serviceUnavailable, .unavailable, reason: "the registry is loading its tokens; retry shortly")
        }
    }

    /// ``write(key:_:)`` for a registration of `user`: one of the user's registrations at a time (on
    /// this instance), and refused (429 `quotaExceeded`) when it would make one token of `kind`
    /// more active than the user's quota allows.
    private func register(
        user: String, kind: TokenKind, key: String, _ decide: @escaping @Sendable (TokenRecord?, Date) throws(APIError) -> (TokenRecord, Change)
    ) async throws(APIError) -> WriteResponse {
        let (table, limit) = (self.table, kind == .update ? quotas.liveActivities : quotas.pushToStart)
        let what = kind == .update ? "live activities (the most allowed): end one first" : "push-to-start tokens (the most allowed): invalidate one first"
        // Serialised per user, so that registrations in parallel cannot pass the quota together.
        return try await locks.withLock("user:" + user) { () async throws(APIError) -> WriteResponse in
            try await self.write(key: key) { current, now throws(APIError) in
                // The user gains an active token unless the key already holds one of theirs.
                if current?.state != .active || current?.userId != user, limit > 0, table.activeCount(ofUser: user, kind: kind) >= limit {
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
    private func write(
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
            await self.apply(next, key: key, at: position, replacing: legacyKey)
            metrics.changed(next.kind, change)
            if change == .invalidated, let reason = next.invalidation?.reason { metrics.invalidated(reason) }
            logger.debug(
                "token changed",
                metadata: ["token.key": "\(key)", "token.change": "\(change.rawValue)", "token.fingerprint": "\(TokenFingerprint.of(token: next.token))"])
            return WriteResponse(change: change, token: TokenStateView(next))
        }
    }

    /// Applies a record Kafka acknowledged under `key` to the table. When the record it replaces
    /// was under the bare activity id on the topic (`legacyKey`: written before ids were scoped
    /// per app), that key is deleted from the topic, or compaction would keep the old record for
    /// ever. A reader that meets the old record keeps the newer one (same partition, later
    /// offset); a tombstone Kafka refuses is tried again by the next ``sweep(invalidatedFor:)``.
    private func apply(_ record: TokenRecord, key: String, at position: TokenTable.Position?, replacing legacyKey: String?) async {
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

    /// A registration for a key that has a record: rotation, reactivation, an update of other
    /// fields, or nothing.
    static func reregistration(of current: TokenRecord, as proposed: TokenRecord, now: Date) -> (TokenRecord, Change) {
        var next = proposed
        if current.state != .active {
            // The token was invalidated by APNs (or superseded): registering it, or a new one, revives the key.
            next.state = .active
            next.invalidation = nil
            next.registeredAt = now
            next.updatedAt = now
            return (next, .reactivated)
        }
        if next.token != current.token {
            next.registeredAt = now
            next.updatedAt = now
            return (next, .rotated)
        }
        if next == current {
            // The app confirms the token is its own now: a 410 timestamped before this must not
            // kill it, so the registration time moves on (written: every service judges APNs's
            // verdicts by the record). Within a second of the last registration nothing is written
            // (a repeated request).
            guard now.timeIntervalSince(current.registeredAt) >= Self.confirmationInterval / .seconds(1) else { return (current, .unchanged) }
            next.registeredAt = now
            next.updatedAt = now
            return (next, .confirmed)
        }
        next.updatedAt = now
        // The same token with other fields is a confirmation too (see above).
        if now.timeIntervalSince(current.registeredAt) >= Self.confirmationInterval / .seconds(1) { next.registeredAt = now }
        return (next, .updated)
    }

    /// A re-registration of the same token within this time of the last registration writes
    /// nothing; later, it moves the registration time on (``Change/confirmed``). Short: a 410 still
    /// in flight when the app registers again, timestamped after the record's registration time and
    /// before the app's confirmation, would kill a token the app was just told is registered.
    public static let confirmationInterval: Duration = .seconds(1)
}

extension InvalidationReason {
    /// Whether APNs said so (the app may register the token again), rather than the app or a backend.
    var isFromAPNs: Bool {
        [.apnsUnregistered, .apnsExpiredToken, .apnsBadDeviceToken, .apnsDeviceTokenNotForTopic].contains(self)
    }
}

/// The registry's table as the reader of the tokens topic feeds it (``Registry/topicFeed``).
struct RegistryTopicFeed: TokenTopicTable {
    let registry: Registry

    @discardableResult
    func apply(_ record: TokenRecord, key: String, partition: Int32, offset: Int64) -> Bool {
        let position = TokenTable.Position(partition: partition, offset: offset)
        let applied = registry.table.apply(record, key: key, at: position)
        if !applied { registry.readBehind(record, key: record.key ?? key, at: position) }
        return applied
    }

    func remove(key: String, partition: Int32, offset: Int64) {
        registry.table.remove(key: key, partition: partition, offset: offset)
    }

    var count: Int { registry.table.count }
}
