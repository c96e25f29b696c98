import Foundation
import IsletKafka
import IsletMessages
import Synchronization

/// The registry's state: the latest ``TokenRecord`` of every key of `islet.tokens.v1`, with the
/// indexes the API needs (a user's activities, a device's owner).
///
/// It is built from the topic (``TokenTableLoader``); token-registry also applies its own writes as
/// soon as Kafka acknowledges them. Both paths may apply the same record, in either order: a
/// record is applied only if it is newer in its partition than what the key holds, so the table
/// never moves back. (The services that send keep the compact ``PartitionTokens`` instead.)
public final class TokenTable: Sendable {
    /// Where a record sits in the topic.
    public typealias Position = KafkaPosition

    struct Entry: Sendable {
        var record: TokenRecord
        var position: Position?
        /// The key the record has on the topic: the table's key, or the bare activity id of a
        /// record written before activity ids were scoped per app (``TokenRecord/legacyKey``).
        var topicKey: String
    }

    private struct State {
        /// By ``TokenRecord/key``: `<bundleId>/<activityId>` or the push-to-start key.
        var entries: [String: Entry] = [:]
        /// user → keys of their update tokens.
        var activitiesByUser: [String: Set<String>] = [:]
        /// Each user's push-to-start token keys.
        var pushToStartByUser: [String: Set<String>] = [:]
        /// activity id → the keys of the update tokens of that id, one per app that has it.
        var keysByActivity: [String: Set<String>] = [:]
        /// A record still held under its old topic key (the bare activity id) → its key.
        var legacyKeys: [String: String] = [:]
        /// `bundleId:deviceId` → the user who first registered a push-to-start token for that device.
        var deviceOwners: [String: String] = [:]

        mutating func unindex(_ key: String, _ entry: Entry) {
            activitiesByUser[entry.record.userId]?.remove(key)
            pushToStartByUser[entry.record.userId]?.remove(key)
            if let activityId = entry.record.activityId, entry.record.kind == .update {
                keysByActivity[activityId]?.remove(key)
                if keysByActivity[activityId]?.isEmpty == true { keysByActivity[activityId] = nil }
            }
            if entry.topicKey != key { legacyKeys[entry.topicKey] = nil }
        }
    }

    private let state = Mutex(State())
    private let observers = Mutex<[@Sendable (String) -> Void]>([])

    public init() {}

    /// Calls `observer` with the key of every record applied from now on (after the table changed,
    /// on the applier's thread: keep it short). apns-dispatcher learns this way that a token its
    /// requests wait for arrived.
    public func onApply(_ observer: @escaping @Sendable (String) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    /// Applies a record read from, or acknowledged by, the topic under `topicKey` (its key there);
    /// returns whether it changed the table. The table keeps it under ``TokenRecord/key``, which
    /// differs from `topicKey` only for a record written before activity ids were scoped per app.
    /// A record older in its partition than what the key holds is ignored: the table never moves back.
    @discardableResult
    public func apply(_ record: TokenRecord, key topicKey: String, at position: Position?) -> Bool {
        applyReplacing(record, key: topicKey, at: position).applied
    }

    /// ``apply(_:key:at:)``, and the record it replaced, with where that one was (in one step: no
    /// other record of the key comes in between).
    public func applyReplacing(_ record: TokenRecord, key topicKey: String, at position: Position?)
        -> (applied: Bool, replaced: (record: TokenRecord, position: Position?)?)
    {
        let key = record.key ?? topicKey
        let (changed, replaced) = applyLocked(record, key: key, topicKey: topicKey, at: position)
        if changed {
            for observer in observers.withLock({ $0 }) { observer(key) }
        }
        return (changed, replaced.map { ($0.record, $0.position) })
    }

    private func applyLocked(_ record: TokenRecord, key: String, topicKey: String, at position: Position?) -> (Bool, Entry?) {
        state.withLock { state in
            let replaced = state.entries[key]
            if let current = replaced {
                if let old = current.position, let new = position, old.partition == new.partition, new.offset <= old.offset {
                    return (false, nil)
                }
                state.unindex(key, current)
            }
            // On the topic the latest record of a key replaces the one before, even when the two
            // belong to different apps (an old, unscoped key: a ticketed owner's record after a
            // squatter's in another app). The earlier one is gone, and so is it here.
            if topicKey != key, let previous = state.legacyKeys[topicKey], previous != key, let earlier = state.entries[previous],
                earlier.topicKey == topicKey
            {
                state.entries[previous] = nil
                state.unindex(previous, earlier)
            }
            state.entries[key] = Entry(record: record, position: position, topicKey: topicKey)
            if topicKey != key { state.legacyKeys[topicKey] = key }
            if record.kind == .update {
                state.activitiesByUser[record.userId, default: []].insert(key)
                if let activityId = record.activityId { state.keysByActivity[activityId, default: []].insert(key) }
            } else {
                state.pushToStartByUser[record.userId, default: []].insert(key)
            }
            // Only a push-to-start or widget registration makes its user the device's owner: an
            // activity registration may name any device id, and must not claim one by naming it.
            if record.kind == .pushToStart || record.kind == .widget, let deviceId = record.deviceId {
                let device = Self.deviceKey(bundleId: record.app.bundleId, deviceId: deviceId)
                if state.deviceOwners[device] == nil { state.deviceOwners[device] = record.userId }
            }
            return (true, replaced)
        }
    }

    /// A tombstone: `topicKey` was deleted from the compacted topic. It removes the record held
    /// under that topic key only (a tombstone of a record's old, unscoped key leaves the record
    /// written since under its new key).
    public func remove(key topicKey: String, at position: Position?) {
        state.withLock { state in
            let key = state.legacyKeys[topicKey] ?? topicKey
            guard let current = state.entries[key], current.topicKey == topicKey else { return }
            if let old = current.position, let new = position, old.partition == new.partition, new.offset <= old.offset { return }
            state.entries[key] = nil
            state.unindex(key, current)
        }
    }

    /// Where the record of `key` was read (or acknowledged), when the table knows.
    public func position(forKey key: String) -> Position? {
        state.withLock { $0.entries[key]?.position }
    }

    public func record(forKey key: String) -> TokenRecord? {
        state.withLock { $0.entries[key]?.record }
    }

    /// The key `key`'s record has on the topic, when it is not `key` itself (a record written
    /// before activity ids were scoped per app, under the bare activity id).
    public func legacyTopicKey(forKey key: String) -> String? {
        state.withLock { state in state.entries[key].flatMap { $0.topicKey == key ? nil : $0.topicKey } }
    }

    /// The keys (`<bundleId>/<activityId>`) of every app's update token for `activityId`, sorted:
    /// one when a single app uses the id. (Devices' records of those activities are not among them:
    /// ``deviceKeys(ofActivity:)``.)
    public func keys(forActivity activityId: String) -> [String] {
        state.withLock { state in
            (state.keysByActivity[activityId] ?? []).filter { state.entries[$0]?.record.deviceKeyed != true }.sorted()
        }
    }

    /// The keys of the other devices' records (`<bundleId>/<activityId>/<deviceId>`) of an activity
    /// (`<bundleId>/<activityId>`), sorted.
    public func deviceKeys(ofActivity activityKey: String) -> [String] {
        guard let activityId = MessageKey.splitActivity(activityKey)?.activityId else { return [] }
        return state.withLock { state in
            (state.keysByActivity[activityId] ?? []).filter { key in
                guard let entry = state.entries[key], entry.record.deviceKeyed == true else { return false }
                return entry.record.activityKey == activityKey
            }.sorted()
        }
    }

    /// The user who owns a device's tokens, if any were registered.
    public func owner(bundleId: String, deviceId: String) -> String? {
        state.withLock { $0.deviceOwners[Self.deviceKey(bundleId: bundleId, deviceId: deviceId)] }
    }

    /// A user's update tokens in `states`, most recently registered first, at most `limit`: one per
    /// activity (its own record; the records of its other devices are not listed).
    public func activities(ofUser user: String, in states: Set<TokenState>, limit: Int) -> [TokenRecord] {
        let records = state.withLock { state in
            (state.activitiesByUser[user] ?? []).compactMap { state.entries[$0]?.record }.filter { states.contains($0.state) && $0.deviceKeyed != true }
        }
        return Array(records.sorted { ($0.registeredAt, $0.activityId ?? "") > ($1.registeredAt, $1.activityId ?? "") }.prefix(limit))
    }

    /// The keys of the other widget records (``TokenKind/widget``) of `key`'s app and device, by
    /// key: the device's one widget token registered under its other kinds.
    public func widgetSiblings(of key: String) -> [String] {
        guard let (bundleId, deviceId, _) = MessageKey.splitWidget(key) else { return [] }
        return state.withLock { state in
            guard let user = state.entries[key]?.record.userId else { return [] }
            return (state.pushToStartByUser[user] ?? []).filter { other in
                guard other != key, let parts = MessageKey.splitWidget(other) else { return false }
                return parts.bundleId == bundleId && parts.deviceId == deviceId
            }.sorted()
        }
    }

    public var count: Int { state.withLock { $0.entries.count } }

    /// The keys of activity (update) records invalidated before `date` (for the retention sweep).
    /// Push-to-start records are kept: they carry the device's owner.
    /// An activity's own record is kept while another device's record of it is active: it says
    /// whose the activity is.
    public func keys(invalidatedBefore date: Date) -> [String] {
        state.withLock { state in
            state.entries.compactMap { key, entry in
                let record = entry.record
                guard record.kind == .update, record.state == .invalidated, let at = record.invalidation?.invalidatedAt, at < date else { return nil }
                if record.deviceKeyed != true, let activityId = record.activityId,
                    (state.keysByActivity[activityId] ?? []).contains(where: { other in
                        guard let device = state.entries[other]?.record, device.deviceKeyed == true else { return false }
                        return device.state == .active && device.activityKey == key
                    })
                {
                    return nil
                }
                return key
            }
        }
    }

    /// Whether another record of the activity `key` belongs to (its own, or another device's) is
    /// active and `user`'s: a registration under `key` then adds no activity to the user's count.
    public func hasOtherActiveRecord(ofActivityOf key: String, user: String) -> Bool {
        let activityKey = MessageKey.splitDevice(key)?.activityKey ?? key
        guard let activityId = MessageKey.splitActivity(activityKey)?.activityId else { return false }
        return state.withLock { state in
            (state.keysByActivity[activityId] ?? []).contains { other in
                guard other != key, let record = state.entries[other]?.record else { return false }
                return record.activityKey == activityKey && record.userId == user && record.state == .active
            }
        }
    }

    /// How many of `user`'s tokens of `kind` are active (for quotas): for update tokens, how many
    /// activities have an active token on any of their devices.
    public func activeCount(ofUser user: String, kind: TokenKind) -> Int {
        state.withLock { state in
            let keys = (kind == .update ? state.activitiesByUser[user] : state.pushToStartByUser[user]) ?? []
            var devices: Set<String> = []
            var count = 0
            for key in keys {
                guard let record = state.entries[key]?.record, record.state == .active, record.kind == kind else { continue }
                if record.deviceKeyed == true, let activityKey = record.activityKey {
                    // Counted once per activity: its own record or its first active device's.
                    if state.entries[activityKey]?.record.state == .active && state.entries[activityKey]?.record.userId == user { continue }
                    if !devices.insert(activityKey).inserted { continue }
                }
                count += 1
            }
            return count
        }
    }

    private static func deviceKey(bundleId: String, deviceId: String) -> String { "\(bundleId):\(deviceId)" }
}
