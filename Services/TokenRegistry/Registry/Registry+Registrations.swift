import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// The app's registrations: who owns a token, and what a registration writes.
extension Registry {
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
        let (app, deviceId) = (request.app, request.deviceId)
        if let deviceId, let owner = table.owner(bundleId: request.app.bundleId, deviceId: deviceId), owner != user {
            throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
        }
        let verified = try await verifyTicket(request.ticket, user: user, activityId: activityId, bundleId: app.bundleId)
        let activityKey = MessageKey.activity(bundleId: app.bundleId, activityId: activityId)
        // An activity's registrations one at a time (on this instance): which of its records a
        // device's goes to is decided from its records (``Registry/registrationKey``).
        let response = try await locks.withLock("activity:" + activityKey) { () async throws(APIError) -> WriteResponse in
            if let deviceId, let deviceKey = try self.registrationKey(activityKey: activityKey, deviceId: deviceId, token: request.token, user: user) {
                return try await self.registerDevice(deviceKey, activityKey: activityKey, user: user, request, verified: verified)
            }
            let response = try await self.registerOwn(activityKey, activityId: activityId, user: user, request, verified: verified)
            if response.change == .registered || response.change == .claimed {
                // The activity is this user's now: no other user's device keeps a record of it.
                await self.invalidateDevices(of: activityKey, except: user, reason: .claimedByOwner)
            }
            return response
        }
        // The device's push-to-start token of this type, retired because a start was not
        // confirmed in time, did start an activity after all: it works.
        if let deviceId {
            await reviveUnconfirmedStart(bundleId: app.bundleId, deviceId: deviceId, attributesType: request.attributesType, activityId: activityId, user: user)
        }
        return response
    }

    /// Makes the device's push-to-start token of `attributesType` active again when it was retired
    /// by a `startUnconfirmed` for this very activity (no update token came within the
    /// confirmation time): the device's update token of that activity shows the start reached it
    /// (the phone was offline past the time, or the app slow). An activity the app started itself,
    /// or any other, proves nothing of the push-to-start token and revives nothing. Written through
    /// the registrations' path (the user's quota, the key's lock), registered again at this moment,
    /// so a repeat of the old verdict cannot retire it again. A write Kafka refuses is left: the
    /// app's next push-to-start registration revives the key too.
    func reviveUnconfirmedStart(bundleId: String, deviceId: String, attributesType: String, activityId: String, user: String) async {
        let key = MessageKey.pushToStart(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType)
        @Sendable func retiredForThis(_ record: TokenRecord?) -> Bool {
            guard let record, record.state == .invalidated, record.userId == user, let invalidation = record.invalidation else { return false }
            return invalidation.reason == .startUnconfirmed && invalidation.startActivityId == activityId
        }
        guard retiredForThis(table.record(forKey: key)) else { return }
        do {
            let response = try await register(user: user, kind: .pushToStart, key: key) { current, now throws(APIError) in
                guard let current else { throw APIError.notFound }
                guard retiredForThis(current) else { return (current, .unchanged) }
                // The same token, registered again: reactivated now (registrations' one rule).
                return Self.reregistration(of: current, as: current, now: now)
            }
            if response.change == .reactivated {
                logger.notice(
                    "push-to-start token active again: its device registered the update token of the activity whose start was unconfirmed",
                    metadata: ["token.key": "\(key)", "activity.id": "\(activityId)"])
            }
        } catch {
            // (Gone meanwhile: nothing to revive.)
            if error.status != .notFound {
                logger.warning("a push-to-start token could not be made active again", metadata: ["token.key": "\(key)", "error": "\(error)"])
            }
        }
    }

    /// The activity's own record (`<bundleId>/<activityId>`): its first device's, or the only one
    /// of an app that names no devices.
    private func registerOwn(_ key: String, activityId: String, user: String, _ request: RegisterActivityTokenRequest, verified: Bool)
        async throws(APIError) -> WriteResponse
    {
        let (token, attributesType, app, appVersion) = (request.token, request.attributesType, request.app, request.appVersion)
        let (startedAt, deviceId) = (request.activityStartedAt, request.deviceId)
        let logger = self.logger
        return try await register(user: user, kind: .update, key: key) {
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
            if current.state == .invalidated, let invalidation = current.invalidation, !invalidation.reason.isFromAPNs || invalidation.everyDevice == true {
                let reason = invalidation.reason
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

    /// Registers or rotates a device's WidgetKit push token for the app's widgets of `kind`
    /// (iOS 26). The device is the user's as for push-to-start: one user's device cannot take
    /// another's widgets. Widget tokens have a quota of their own, as large as push-to-start's.
    public func registerWidgetToken(
        user: String, bundleId: String, deviceId: String, kind: String, _ request: RegisterWidgetTokenRequest
    ) async throws(APIError) -> WriteResponse {
        let key = try Self.widgetKey(bundleId: bundleId, deviceId: deviceId, kind: kind)
        try requireServed(bundleId, field: "bundleId")
        let request = try Validation.widgetToken(request)
        if let owner = table.owner(bundleId: bundleId, deviceId: deviceId), owner != user {
            throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
        }
        return try await register(user: user, kind: .widget, key: key) { current, now throws(APIError) in
            let app = AppTarget(bundleId: bundleId, environment: request.environment)
            guard let current else {
                return (
                    TokenRecord(
                        kind: .widget, deviceId: deviceId, userId: user, token: request.token, app: app, attributesType: kind,
                        frequentUpdatesEnabled: false, appVersion: request.appVersion, state: .active, registeredAt: now, updatedAt: now),
                    .registered
                )
            }
            guard current.userId == user else {
                throw APIError(.forbidden, .forbidden, field: "deviceId", reason: "the device belongs to another user")
            }
            var next = current
            next.token = request.token
            next.app = app
            next.appVersion = request.appVersion
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

    /// A registration is for one of the apps this registry serves (any, when none are configured).
    private func requireServed(_ bundleId: String, field: String) throws(APIError) {
        guard apps.isEmpty || apps.contains(bundleId) else {
            throw APIError.invalid(field, "is not an app this registry serves (ISLET_APPS)")
        }
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
