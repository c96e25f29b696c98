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
/// never moves back. apns-dispatcher and content-service keep one too, to find an activity's token.
public final class TokenTable: Sendable {
    /// Where a record sits in the topic.
    public struct Position: Sendable, Hashable {
        public var partition: Int32
        public var offset: Int64

        public init(partition: Int32, offset: Int64) {
            self.partition = partition
            self.offset = offset
        }
    }

    struct Entry: Sendable {
        var record: TokenRecord
        var position: Position?
    }

    private struct State {
        var entries: [String: Entry] = [:]
        /// user → keys of their update tokens.
        var activitiesByUser: [String: Set<String>] = [:]
        /// Each user's push-to-start token keys.
        var pushToStartByUser: [String: Set<String>] = [:]
        /// `bundleId:deviceId` → the user who first registered a push-to-start token for that device.
        var deviceOwners: [String: String] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// Applies a record read from, or acknowledged by, the topic; returns whether it changed the table.
    @discardableResult
    public func apply(_ record: TokenRecord, key: String, at position: Position?) -> Bool {
        state.withLock { state in
            if let current = state.entries[key], let old = current.position, let new = position,
                old.partition == new.partition, new.offset <= old.offset
            {
                return false
            }
            state.entries[key] = Entry(record: record, position: position)
            if record.kind == .update {
                state.activitiesByUser[record.userId, default: []].insert(key)
            } else {
                state.pushToStartByUser[record.userId, default: []].insert(key)
            }
            // Only a push-to-start registration makes its user the device's owner: an activity
            // registration may name any device id, and must not claim one by naming it.
            if record.kind == .pushToStart, let deviceId = record.deviceId {
                let device = Self.deviceKey(bundleId: record.app.bundleId, deviceId: deviceId)
                if state.deviceOwners[device] == nil { state.deviceOwners[device] = record.userId }
            }
            return true
        }
    }

    /// A tombstone: the key was deleted from the compacted topic.
    public func remove(key: String, at position: Position?) {
        state.withLock { state in
            guard let current = state.entries[key] else { return }
            if let old = current.position, let new = position, old.partition == new.partition, new.offset <= old.offset { return }
            state.entries[key] = nil
            state.activitiesByUser[current.record.userId]?.remove(key)
            state.pushToStartByUser[current.record.userId]?.remove(key)
        }
    }

    public func record(forKey key: String) -> TokenRecord? {
        state.withLock { $0.entries[key]?.record }
    }

    /// The user who owns a device's tokens, if any were registered.
    public func owner(bundleId: String, deviceId: String) -> String? {
        state.withLock { $0.deviceOwners[Self.deviceKey(bundleId: bundleId, deviceId: deviceId)] }
    }

    /// A user's update tokens in `states`, most recently registered first, at most `limit`.
    public func activities(ofUser user: String, in states: Set<TokenState>, limit: Int) -> [TokenRecord] {
        let records = state.withLock { state in
            (state.activitiesByUser[user] ?? []).compactMap { state.entries[$0]?.record }.filter { states.contains($0.state) }
        }
        return Array(records.sorted { ($0.registeredAt, $0.activityId ?? "") > ($1.registeredAt, $1.activityId ?? "") }.prefix(limit))
    }

    public var count: Int { state.withLock { $0.entries.count } }

    /// The keys of activity (update) records invalidated before `date` (for the retention sweep).
    /// Push-to-start records are kept: they carry the device's owner.
    public func keys(invalidatedBefore date: Date) -> [String] {
        state.withLock { state in
            state.entries.compactMap { key, entry in
                guard entry.record.kind == .update, entry.record.state == .invalidated, let at = entry.record.invalidation?.invalidatedAt, at < date
                else { return nil }
                return key
            }
        }
    }

    /// How many of `user`'s tokens of `kind` are active (for quotas).
    public func activeCount(ofUser user: String, kind: TokenKind) -> Int {
        state.withLock { state in
            let keys = (kind == .update ? state.activitiesByUser[user] : state.pushToStartByUser[user]) ?? []
            return keys.reduce(0) { count, key in count + (state.entries[key]?.record.state == .active ? 1 : 0) }
        }
    }

    private static func deviceKey(bundleId: String, deviceId: String) -> String { "\(bundleId):\(deviceId)" }
}
