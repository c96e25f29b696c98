import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// An activity on several devices: one update token per device. The activity's own record
// (`<bundleId>/<activityId>`) is its first device's; each further device of the same user has its
// own (`<bundleId>/<activityId>/<deviceId>`, ``TokenRecord/deviceKeyed``), which content-service
// sends a copy of every request to, apns-dispatcher budgets apart, and APNs's verdicts end alone.
extension Registry {
    /// Where a registration that names `deviceId` goes when it is not the activity's own record:
    /// the record that holds its token already (an app whose device id changed), else the
    /// device's record when it has one (of this user), or a new one when the activity's own
    /// record is this user's and another device's (``Quotas/devicesPerActivity`` allowing).
    /// `nil`: the activity's own record (its first registration, the same device again, an app
    /// that named no device before — today's rotation — or another user's activity, which the own
    /// record's rules refuse or claim).
    func registrationKey(activityKey: String, deviceId: String, token: String, user: String) throws(APIError) -> String? {
        let own = table.record(forKey: activityKey)
        if let own, own.userId != user { return nil }
        let devices = table.deviceKeys(ofActivity: activityKey).compactMap { key in table.record(forKey: key).map { (key: key, record: $0) } }
        if own == nil, devices.contains(where: { $0.record.userId != user && $0.record.state == .active }) {
            // The own record was deleted while another user's devices follow the activity.
            throw APIError(.forbidden, .forbidden, field: "activityId", reason: "the activity belongs to another user")
        }
        // One phone, one record: its token is already one of the activity's.
        if own?.token == token { return nil }
        if let same = devices.first(where: { $0.record.token == token && $0.record.userId == user }) { return same.key }
        guard let (bundleId, activityId) = MessageKey.splitActivity(activityKey) else { return nil }
        let deviceKey = MessageKey.device(bundleId: bundleId, activityId: activityId, deviceId: deviceId)
        if let device = table.record(forKey: deviceKey) { return device.userId == user ? deviceKey : nil }
        guard quotas.devicesPerActivity > 1, let own, let first = own.deviceId, first != deviceId else { return nil }
        let following = (own.state == .active ? 1 : 0) + devices.filter { $0.record.state == .active }.count
        guard following < quotas.devicesPerActivity else {
            throw APIError(
                .tooManyRequests, .quotaExceeded, field: "deviceId",
                reason: "the activity already follows \(quotas.devicesPerActivity) devices (ISLET_QUOTA_DEVICES_PER_ACTIVITY): end it on one first")
        }
        return deviceKey
    }

    /// Registers or rotates one more device's token of the user's activity.
    func registerDevice(_ key: String, activityKey: String, user: String, _ request: RegisterActivityTokenRequest, verified: Bool)
        async throws(APIError) -> WriteResponse
    {
        let table = self.table
        return try await register(user: user, kind: .update, key: key) { current, now throws(APIError) in
            let own = table.record(forKey: activityKey)
            // (Read again under the key's lock: the activity may have become another user's.)
            if let own, own.userId != user {
                throw APIError(.forbidden, .forbidden, field: "activityId", reason: "the activity belongs to another user")
            }
            if let own {
                guard own.attributesType == request.attributesType else {
                    throw APIError(.conflict, .conflict, field: "attributesType", reason: "an activity keeps the attributes type it was registered with")
                }
                if own.state == .invalidated, let invalidation = own.invalidation, invalidation.everyDevice == true || Self.endsEveryDevice(invalidation.reason) {
                    let reason = invalidation.reason
                    throw APIError(.conflict, .conflict, field: "activityId", reason: "the activity has ended (\(reason.rawValue)): start a new one")
                }
            }
            let fresh = TokenRecord(
                kind: .update, activityId: MessageKey.splitActivity(activityKey)?.activityId, deviceId: request.deviceId, userId: user, token: request.token, app: request.app, attributesType: request.attributesType,
                frequentUpdatesEnabled: request.frequentUpdatesEnabled, appVersion: request.appVersion, state: .active,
                activityStartedAt: request.activityStartedAt, registeredAt: now, updatedAt: now,
                ownerVerified: verified || own?.ownerVerified == true ? true : nil, locale: request.locale, deviceKeyed: true)
            guard let current else { return (fresh, .registered) }
            guard current.attributesType == request.attributesType else {
                throw APIError(.conflict, .conflict, field: "attributesType", reason: "an activity keeps the attributes type it was registered with")
            }
            if current.state == .invalidated, let reason = current.invalidation?.reason, !reason.isFromAPNs {
                throw APIError(.conflict, .conflict, field: "activityId", reason: "the activity has ended on this device (\(reason.rawValue)): start a new one")
            }
            var next = current
            next.token = request.token
            next.app = request.app
            next.frequentUpdatesEnabled = request.frequentUpdatesEnabled
            next.appVersion = request.appVersion
            next.activityStartedAt = request.activityStartedAt ?? current.activityStartedAt
            next.locale = request.locale ?? current.locale
            if verified { next.ownerVerified = true }
            return Self.reregistration(of: current, as: next, now: now)
        }
    }

    /// Whether an activity's own record invalidated for `reason` ended it on every device (its
    /// backend or Islet ended it), rather than on its first device only (the app there ended or
    /// dismissed it, or APNs refused that device's token).
    static func endsEveryDevice(_ reason: InvalidationReason) -> Bool {
        [.backendEnded, .severelyStale, .lifetimeExceeded].contains(reason)
    }

    /// Invalidates the active records of the activity's other devices, but `user`'s when given;
    /// returns whether Kafka took every one.
    @discardableResult
    func invalidateDevices(of activityKey: String, except user: String?, reason: InvalidationReason) async -> Bool {
        var all = true
        for key in table.deviceKeys(ofActivity: activityKey) {
            guard let record = table.record(forKey: key), record.state == .active, record.userId != user else { continue }
            do {
                _ = try await invalidate(user: nil, key: key, reason: reason)
            } catch {
                all = false
                logger.warning("a device's record of the activity was not invalidated", metadata: ["token.key": "\(key)", "error": "\(error)"])
            }
        }
        return all
    }

    /// The key of `deviceId`'s record of the user's activity: its own record's when that device
    /// registered it (or the app names no devices), else the device's; 404 when the device has none.
    func deviceRecordKey(_ activityKey: String, deviceId: String?, user: String) throws(APIError) -> String {
        guard let given = deviceId else {
            // Which device's? Not the first device's by default: that one may still show it.
            guard !deviceViews(of: activityKey, user: user).contains(where: { $0.state == .active }) else {
                throw APIError(.conflict, .conflict, field: "deviceId", reason: "the activity is followed on several devices: name the device")
            }
            return activityKey
        }
        let deviceId = try Validation.identifier(given, field: "deviceId")
        guard let (bundleId, activityId) = MessageKey.splitActivity(activityKey) else { throw APIError.notFound }
        let deviceKey = MessageKey.device(bundleId: bundleId, activityId: activityId, deviceId: deviceId)
        if let device = table.record(forKey: deviceKey), device.userId == user { return deviceKey }
        if let own = table.record(forKey: activityKey), own.userId == user, own.deviceId == nil || own.deviceId == deviceId { return activityKey }
        throw APIError.notFound
    }

    /// The records of the activity's other devices that `user` owns (all of them for `nil`), as the API shows them.
    func deviceViews(of activityKey: String, user: String?) -> [TokenStateView] {
        table.deviceKeys(ofActivity: activityKey).compactMap { key in
            guard let record = table.record(forKey: key), user == nil || record.userId == user else { return nil }
            return TokenStateView(record)
        }
    }

    /// A record of an activity's own key read behind this instance's registration of that key
    /// (``ownRegistrations``): another instance registered the activity a moment before, from
    /// another device of the same user, and this instance — its table not having read that yet —
    /// registered its own device's token over it instead of beside it. The last record read before
    /// the registration decides, once the reader reaches the registration itself: when it is
    /// another device's active registration of the same user, it is written again under that
    /// device's key (unless the key has a record), under the activity's lock and only while the
    /// activity's own record is still this registration's and the device quota allows — as a
    /// registration that saw it would have done. Only its writer repairs, once.
    @discardableResult
    func readBehindRegistration(_ record: TokenRecord, key: String, at position: TokenTable.Position) -> Task<Void, Never>? {
        guard quotas.devicesPerActivity > 1, record.kind == .update, record.deviceKeyed != true else { return nil }
        guard let behind = ownRegistrations.withLock({ $0.read(record, key: key, at: position) })?.behind?.record else { return nil }
        return repairLostDevice(behind, key: key, over: position)
    }

    /// The feed read a record of an activity's own key (`registration`) that replaced `lost` in the
    /// table: when that is another instance's registration of the user's second device written
    /// over the first's within moments (its table had not read the first yet: both registered the
    /// activity), the first device's is written again as that device's record. A registration
    /// replaces another device's own record in no other way while devices are kept apart; the
    /// moments rule out a rotation written before (``Quotas/devicesPerActivity`` was 1 then) read
    /// again at start-up. Any instance that reads it repairs (the first finds nothing to do).
    @discardableResult
    func readOver(_ lost: TokenRecord, by registration: TokenRecord, key: String, at position: TokenTable.Position) -> Task<Void, Never>? {
        guard quotas.devicesPerActivity > 1, registration.kind == .update, registration.deviceKeyed != true, lost.deviceKeyed != true,
            registration.state == .active, registration.registeredAt == registration.updatedAt,
            registration.registeredAt.timeIntervalSince(lost.updatedAt) < 60, now().timeIntervalSince(registration.registeredAt) < 600
        else { return nil }
        return repairLostDevice(lost, key: key, over: position)
    }

    /// Writes `lost` (an activity's own record another device's registration wrote over) again as
    /// its device's record, when it was active, another device's of the same user and token, its
    /// device has no record yet, and — under the activity's lock — the own record is still the one
    /// at `position`, active, and the device quota allows.
    private func repairLostDevice(_ behind: TokenRecord, key: String, over position: TokenTable.Position) -> Task<Void, Never>? {
        guard behind.state == .active, let lostDevice = behind.deviceId, let activityId = behind.activityId,
            let current = table.record(forKey: key), current.userId == behind.userId, let device = current.deviceId, device != lostDevice,
            current.token != behind.token
        else { return nil }
        let deviceKey = MessageKey.device(bundleId: behind.app.bundleId, activityId: activityId, deviceId: lostDevice)
        guard table.record(forKey: deviceKey) == nil else { return nil }
        let (logger, table) = (self.logger, self.table)
        return Task {
            do {
                try await self.locks.withLock("activity:" + key) { () async throws(APIError) -> Void in
                    // Still this registration's, not ended, and room for one more device.
                    guard table.position(forKey: key) == position, let own = table.record(forKey: key), own.state == .active,
                        own.userId == behind.userId, (try? self.registrationKey(activityKey: key, deviceId: lostDevice, token: behind.token, user: behind.userId)) == deviceKey
                    else { return }
                    let response = try await self.write(key: deviceKey) { existing, now throws(APIError) in
                        if let existing { return (existing, .unchanged) }
                        var again = behind
                        again.deviceKeyed = true
                        again.updatedAt = now
                        return (again, .registered)
                    }
                    if response.change == .registered {
                        logger.notice(
                            "a device's registration another instance wrote over was written again as that device's",
                            metadata: ["token.key": "\(deviceKey)", "token.fingerprint": "\(TokenFingerprint.of(token: behind.token))"])
                    }
                }
            } catch {
                logger.error("a device's registration written over could not be written again", metadata: ["token.key": "\(deviceKey)", "error": "\(error)"])
            }
        }
    }
}
