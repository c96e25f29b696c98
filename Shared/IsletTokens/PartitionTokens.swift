import Foundation
import IsletMessages
import Synchronization

/// The tokens of the partitions of `islet.tokens.v1` this instance owns, kept compact: what
/// apns-dispatcher needs to send (``DeliveryToken``), a few hundred bytes per token.
///
/// The activity topics are co-partitioned, so the instance that owns partition p of
/// `islet.push-requests.v1` finds every token its requests need in partition p of the token topic.
/// ``PartitionTokenLoader`` fills a partition when it is assigned (it reads that partition from its
/// start) and follows it while it is owned; ``drop(partitions:)`` forgets it when it is revoked.
///
/// Compact: the token is held as bytes (half its hex) in one shared byte array (no allocation per
/// token; the space of tokens replaced or dropped is reclaimed once it is half of the array), what
/// many tokens share (app, environment, kind, state, app version, the frequent-updates flag, the
/// language) once
/// in a table of *profiles*, times as milliseconds. A record is applied only when it is newer in its partition than what the key
/// holds, so the table never moves back.
public final class PartitionTokens: Sendable {
    struct Entry {
        var offset: Int64
        var registeredAt: Int64
        /// Milliseconds since 1970; `Int64.min`: not reported.
        var startedAt: Int64
        var partition: Int32
        var profile: UInt32
        /// Where the token's bytes are in ``State/arena``.
        var tokenStart: UInt32
        var tokenLength: UInt16
        /// The record sits on the topic under the bare activity id (written before activity ids
        /// were scoped per app).
        var legacyTopicKey: Bool
        /// The owner's user id, hashed (``DeliveryToken/owner``).
        var owner: UInt64
    }

    /// Whose push-to-start tokens: an app, an attributes type, a user (the whole id: a hash that
    /// two ids share would give one user's starts to the other).
    struct StartOwner: Hashable {
        var bundleId: String
        var attributesType: String
        var userId: String

        /// The owner and device of a push-to-start key (`pts:<bundleId>:<deviceId>:<attributesType>`).
        static func of(_ key: String, userId: String) -> (StartOwner, deviceId: String)? {
            guard key.hasPrefix("pts:") else { return nil }
            let parts = key.dropFirst(4).split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            return (StartOwner(bundleId: String(parts[0]), attributesType: String(parts[2]), userId: userId), String(parts[1]))
        }
    }

    /// Whose widget tokens: an app, a widget kind, a user's hashed id (``DeliveryToken/owner``,
    /// 64-bit FNV-1a: not collision-resistant), which is what the table keeps of an activity's user.
    /// Two users whose ids share a hash each get the other's widget reloads: a reload carries no
    /// content (the widget fetches its own, with its own credentials), so only the moments of the
    /// other's state changes reach them. By chance, about one pair in 10^7 at a million users; an
    /// app whose user ids an attacker chooses should not name widgets in its templates.
    struct WidgetOwner: Hashable {
        var bundleId: String
        var kind: String
        var owner: UInt64
    }

    /// What many tokens share.
    struct Profile: Hashable {
        var app: AppTarget
        var kind: TokenKind
        var state: TokenState
        var appVersion: String
        var frequentUpdatesEnabled: Bool
        var locale: String?
    }

    struct State {
        var entries = SlotDictionary<Entry>()
        /// Every token's bytes, one after the other.
        var arena: [UInt8] = []
        /// Bytes of ``arena`` no entry uses any more.
        var garbage = 0
        var profiles: [Profile] = []
        var profileIndex: [Profile: UInt32] = [:]
        /// How many entries use each profile; a profile no entry uses is forgotten and its place
        /// reused: the profiles held follow the tokens held, not every app version and language
        /// ever registered (the app chooses both).
        var profileUses: [Int] = []
        var freeProfiles: [UInt32] = []
        /// The apps with update tokens in the table: profiles of update tokens, by bundle id.
        var updateApps: [String: Int] = [:]
        /// The bare activity id a legacy record sits under → its key (only such records).
        var legacyKeys: [String: String] = [:]
        /// An activity (`<bundleId>/<activityId>`) → the devices it has records of besides its own
        /// (``TokenRecord/deviceKeyed``; only activities that have some).
        var devices: [String: Set<String>] = [:]
        /// A user's push-to-start tokens, by app, attributes type and user → their devices
        /// (``pushToStartKeys(bundleId:attributesType:userId:)``).
        var startDevices: [StartOwner: Set<String>] = [:]
        /// Each push-to-start key indexed there → where (the entry keeps only a hash of its user).
        var startOwnerOf: [String: StartOwner] = [:]
        /// A user's widget tokens, by app, widget kind and user → their devices
        /// (``widgetKeys(bundleId:kind:owner:)``).
        var widgetDevices: [WidgetOwner: Set<String>] = [:]
        var owned: Set<Int32> = []
        var ownsAll = false

        func holds(_ partition: Int32) -> Bool { ownsAll || owned.contains(partition) }

        /// The index of `profile`, used by one more entry.
        mutating func profile(_ profile: Profile) -> UInt32 {
            if let index = profileIndex[profile] {
                profileUses[Int(index)] += 1
                return index
            }
            let index: UInt32
            if let free = freeProfiles.popLast() {
                index = free
                profiles[Int(index)] = profile
                profileUses[Int(index)] = 1
            } else {
                index = UInt32(profiles.count)
                profiles.append(profile)
                profileUses.append(1)
            }
            profileIndex[profile] = index
            if profile.kind == .update { updateApps[profile.app.bundleId, default: 0] += 1 }
            return index
        }

        /// One entry fewer uses the profile at `index`.
        mutating func release(profile index: UInt32) {
            profileUses[Int(index)] -= 1
            guard profileUses[Int(index)] == 0 else { return }
            let profile = profiles[Int(index)]
            profileIndex[profile] = nil
            freeProfiles.append(index)
            if profile.kind == .update {
                updateApps[profile.app.bundleId, default: 1] -= 1
                if updateApps[profile.app.bundleId] == 0 { updateApps[profile.app.bundleId] = nil }
            }
        }

        mutating func removeEntry(_ key: String) {
            guard let entry = entries.removeValue(forKey: key) else { return }
            release(profile: entry.profile)
            garbage += Int(entry.tokenLength)
            if entry.legacyTopicKey, let activity = Self.activityId(of: key) { legacyKeys[activity] = nil }
            if !devices.isEmpty, let (activityKey, deviceId) = MessageKey.splitDevice(key) {
                devices[activityKey]?.remove(deviceId)
                if devices[activityKey]?.isEmpty == true { devices[activityKey] = nil }
            }
            if let (bundleId, deviceId, kind) = MessageKey.splitWidget(key) {
                let owner = WidgetOwner(bundleId: bundleId, kind: kind, owner: entry.owner)
                widgetDevices[owner]?.remove(deviceId)
                if widgetDevices[owner]?.isEmpty == true { widgetDevices[owner] = nil }
            }
            if let owner = startOwnerOf.removeValue(forKey: key), let deviceId = PartitionTokens.deviceId(ofPushToStartKey: key) {
                startDevices[owner]?.remove(deviceId)
                if startDevices[owner]?.isEmpty == true { startDevices[owner] = nil }
            }
        }

        /// Where `bytes` now are in ``arena``; `nil` when they cannot be held (longer than 65,535 bytes).
        mutating func store(_ bytes: [UInt8]) -> (start: UInt32, length: UInt16)? {
            guard let length = UInt16(exactly: bytes.count) else { return nil }
            if arena.count + bytes.count > Int(UInt32.max) { compact() }
            guard arena.count + bytes.count <= Int(UInt32.max), let start = UInt32(exactly: arena.count) else { return nil }
            arena.append(contentsOf: bytes)
            return (start, length)
        }

        /// Reclaims the space of replaced and dropped tokens once it is half of the arena.
        mutating func compactIfWasteful() {
            if garbage > 65_536, garbage * 2 > arena.count { compact() }
        }

        mutating func compact() {
            var packed: [UInt8] = []
            packed.reserveCapacity(arena.count - garbage)
            entries.updateEach { entry in
                let start = Int(entry.tokenStart)
                entry.tokenStart = UInt32(packed.count)
                packed.append(contentsOf: arena[start..<(start + Int(entry.tokenLength))])
            }
            arena = packed
            garbage = 0
        }

        func tokenBytes(_ entry: Entry) -> ArraySlice<UInt8> {
            let start = Int(entry.tokenStart)
            return arena[start..<(start + Int(entry.tokenLength))]
        }

        static func activityId(of key: String) -> String? {
            guard let slash = key.firstIndex(of: "/") else { return nil }
            return String(key[key.index(after: slash)...])
        }
    }

    private let state = Mutex(State())
    private let observers = Mutex<[@Sendable (String) -> Void]>([])
    /// Keeps each token's fingerprint (8 bytes) instead of the token: for a service that never
    /// sends to it (content-service).
    let fingerprintsOnly: Bool

    public init() { fingerprintsOnly = false }

    init(fingerprintsOnly: Bool) { self.fingerprintsOnly = fingerprintsOnly }

    /// Calls `observer` with the key of every record applied from now on (after the table changed,
    /// on the applier's thread: keep it short). apns-dispatcher learns this way that a token its
    /// requests wait for arrived.
    public func onApply(_ observer: @escaping @Sendable (String) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    /// Starts holding these partitions (their records are applied from now on).
    public func own(partitions: some Sequence<Int32>) {
        state.withLock { $0.owned.formUnion(partitions) }
    }

    /// A table of every partition, whichever it is: the whole token topic, kept compact
    /// (content-service, which looks up tokens of activities it does not own; ``TokenTableLoader``
    /// fills it).
    /// - Parameter fingerprintsOnly: keep each token's fingerprint, not the token (``DeliveryToken/token``
    ///   is then empty, ``DeliveryToken/fingerprint`` is kept): 8 bytes instead of about 80.
    public static func whole(fingerprintsOnly: Bool = false) -> PartitionTokens {
        let tokens = PartitionTokens(fingerprintsOnly: fingerprintsOnly)
        tokens.state.withLock { $0.ownsAll = true }
        return tokens
    }

    /// Forgets these partitions and every token read from them.
    public func drop(partitions: some Sequence<Int32>) {
        let dropped = Set(partitions)
        state.withLock { state in
            state.owned.subtract(dropped)
            let keys = state.entries.all.compactMap { dropped.contains($0.value.partition) ? $0.key : nil }
            for key in keys { state.removeEntry(key) }
            state.compactIfWasteful()
        }
    }

    /// The partitions held.
    public var ownedPartitions: Set<Int32> { state.withLock { $0.owned } }

    /// Applies a record read from partition `partition` at `offset` under `topicKey`; returns
    /// whether it changed the table. A record of a partition not held, or older in its partition
    /// than what the key holds, is ignored.
    @discardableResult
    public func apply(_ record: TokenRecord, key topicKey: String, partition: Int32, offset: Int64) -> Bool {
        let key = record.key ?? topicKey
        guard var bytes = Self.bytes(ofHex: record.token), bytes.count <= Int(UInt16.max) else { return false }
        if fingerprintsOnly, let fingerprint = Self.bytes(ofHex: TokenFingerprint.of(token: record.token)) { bytes = fingerprint }
        let changed = state.withLock { state -> Bool in
            guard state.holds(partition) else { return false }
            if let current = state.entries[key], current.partition == partition, offset <= current.offset { return false }
            // On the topic the latest record of a key replaces the one before, even when the two
            // belong to different apps (an old, unscoped key): the earlier one is gone, here too.
            if topicKey != key, let previous = state.legacyKeys[topicKey], previous != key,
                state.entries[previous]?.legacyTopicKey == true
            {
                state.removeEntry(previous)
            }
            state.removeEntry(key)
            guard let (tokenStart, tokenLength) = state.store(bytes) else { return false }
            let profile = state.profile(
                Profile(
                    app: record.app, kind: record.kind, state: record.state, appVersion: record.appVersion,
                    frequentUpdatesEnabled: record.frequentUpdatesEnabled, locale: record.locale))
            state.entries[key] = Entry(
                offset: offset, registeredAt: Self.milliseconds(record.registeredAt),
                startedAt: record.activityStartedAt.map(Self.milliseconds) ?? .min, partition: partition, profile: profile,
                tokenStart: tokenStart, tokenLength: tokenLength, legacyTopicKey: topicKey != key, owner: DeliveryToken.owner(of: record.userId))
            state.compactIfWasteful()
            if topicKey != key { state.legacyKeys[topicKey] = key }
            if record.deviceKeyed == true, let (activityKey, deviceId) = MessageKey.splitDevice(key) {
                state.devices[activityKey, default: []].insert(deviceId)
            }
            if record.kind == .widget, let (bundleId, deviceId, kind) = MessageKey.splitWidget(key) {
                state.widgetDevices[WidgetOwner(bundleId: bundleId, kind: kind, owner: DeliveryToken.owner(of: record.userId)), default: []].insert(deviceId)
            }
            if record.kind == .pushToStart, let (owner, deviceId) = StartOwner.of(key, userId: record.userId) {
                state.startDevices[owner, default: []].insert(deviceId)
                state.startOwnerOf[key] = owner
            }
            return true
        }
        if changed {
            for observer in observers.withLock({ $0 }) { observer(key) }
        }
        return changed
    }

    /// A tombstone of `topicKey` read from `partition` at `offset`. It removes the record held
    /// under that topic key only (a tombstone of a record's old, unscoped key leaves the record
    /// written since under its new key).
    public func remove(key topicKey: String, partition: Int32, offset: Int64) {
        state.withLock { state in
            guard state.holds(partition) else { return }
            let key = state.legacyKeys[topicKey] ?? topicKey
            guard let current = state.entries[key], current.legacyTopicKey == (key != topicKey) else { return }
            if current.partition == partition, offset <= current.offset { return }
            state.removeEntry(key)
            state.compactIfWasteful()
        }
    }

    /// The token held for `key` (`<bundleId>/<activityId>`, or a push-to-start key).
    public func token(forKey key: String) -> DeliveryToken? {
        state.withLock { state -> DeliveryToken? in
            guard let entry = state.entries[key] else { return nil }
            let profile = state.profiles[Int(entry.profile)]
            let bytes = Hex.lowercase(state.tokenBytes(entry))
            return DeliveryToken(
                token: fingerprintsOnly ? "" : bytes, app: profile.app, kind: profile.kind, state: profile.state,
                deviceId: profile.kind == .pushToStart
                    ? Self.deviceId(ofPushToStartKey: key) : profile.kind == .widget ? MessageKey.splitWidget(key)?.deviceId : nil,
                frequentUpdatesEnabled: profile.frequentUpdatesEnabled, appVersion: profile.appVersion,
                registeredAt: Self.date(entry.registeredAt), activityStartedAt: entry.startedAt == .min ? nil : Self.date(entry.startedAt),
                fingerprint: fingerprintsOnly ? bytes : nil, locale: profile.locale, owner: entry.owner)
        }
    }

    /// The key as the table holds it, when it holds one: a caller that keeps the key too can share
    /// its storage (one copy of a long key instead of two).
    public func heldKey(_ key: String) -> String? {
        state.withLock { $0.entries.heldKey(key) }
    }

    /// The keys (`<bundleId>/<activityId>`) of every app's update token for `activityId`, sorted:
    /// one when a single app uses the id. (The apps are looked up among the few the table knows.)
    public func keys(forActivity activityId: String) -> [String] {
        state.withLock { state in
            state.updateApps.keys
                .map { MessageKey.activity(bundleId: $0, activityId: activityId) }
                .filter { state.entries[$0] != nil }
                .sorted()
        }
    }

    /// The keys of the records of an activity's other devices (`<bundleId>/<activityId>/<deviceId>`,
    /// ``TokenRecord/deviceKeyed``), sorted by device: empty for an activity on one device.
    public func deviceKeys(ofActivity activityKey: String) -> [String] {
        state.withLock { state in
            guard let devices = state.devices[activityKey], let (bundleId, activityId) = MessageKey.splitActivity(activityKey) else { return [] }
            return devices.sorted().map { MessageKey.device(bundleId: bundleId, activityId: activityId, deviceId: $0) }
        }
    }

    /// The keys of `userId`'s push-to-start tokens for `attributesType` in the app, active or
    /// not, sorted by device.
    public func pushToStartKeys(bundleId: String, attributesType: String, userId: String) -> [String] {
        state.withLock { state in
            let devices = state.startDevices[StartOwner(bundleId: bundleId, attributesType: attributesType, userId: userId)] ?? []
            return devices.sorted().map { MessageKey.pushToStart(bundleId: bundleId, deviceId: $0, attributesType: attributesType) }
        }
    }

    /// The keys of the widget tokens of widgets of `kind` in the app of the user whose hashed id is
    /// `owner` (``DeliveryToken/owner``; ``MessageKey/widget(bundleId:deviceId:kind:)``), active or
    /// not, sorted by device.
    public func widgetKeys(bundleId: String, kind: String, owner: UInt64) -> [String] {
        state.withLock { state in
            let devices = state.widgetDevices[WidgetOwner(bundleId: bundleId, kind: kind, owner: owner)] ?? []
            return devices.sorted().map { MessageKey.widget(bundleId: bundleId, deviceId: $0, kind: kind) }
        }
    }

    /// Tokens held.
    public var count: Int { state.withLock { $0.entries.count } }

    /// Profiles held (they follow the tokens held).
    public var profileCount: Int { state.withLock { $0.profileIndex.count } }

    /// Tokens held per partition.
    public var countByPartition: [Int32: Int] {
        state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: state.owned.map { ($0, 0) })
            for (_, entry) in state.entries.all { counts[entry.partition, default: 0] += 1 }
            return counts
        }
    }

    // MARK: Encoding

    static func bytes(ofHex hex: String) -> [UInt8]? {
        let utf8 = hex.utf8
        guard utf8.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var high: UInt8?
        for character in utf8 {
            let nibble: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = character - UInt8(ascii: "a") + 10
            default: return nil
            }
            if let value = high {
                bytes.append(value << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        return bytes
    }

    /// Bytes of the token arena, and how many of them no token uses (tests, diagnostics).
    public var arenaBytes: (used: Int, garbage: Int) { state.withLock { ($0.arena.count, $0.garbage) } }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1_000).rounded(.down)) }
    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1_000) }

    /// The device of `pts:<bundleId>:<deviceId>:<attributesType>` (bundle ids and attributes types
    /// hold no `:`).
    public static func deviceId(ofPushToStartKey key: String) -> String? {
        guard key.hasPrefix("pts:") else { return nil }
        let rest = key.dropFirst(4)
        guard let first = rest.firstIndex(of: ":"), let last = rest.lastIndex(of: ":"), first < last else { return nil }
        return String(rest[rest.index(after: first)..<last])
    }
}
