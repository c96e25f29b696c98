import Foundation
import Synchronization

/// The simulator's shared state: faults waiting to be injected, what it accepted, counters.
public final class SimulatorState: Sendable {
    private struct Inner {
        var faults: [(id: Int, fault: Fault, remaining: Int?)] = []
        var nextFaultID = 1
        var recorded: [AcceptedNotification] = []
        var recordedStart = 0  // ring buffer start once full
        var stats = SimulatorStats()
        var nextConnection = 1
        /// Broadcast channels by id, and how many each app has.
        var channels: [String: SimulatedChannel] = [:]
        var channelsPerApp: [String: Int] = [:]
        var broadcasts: [AcceptedBroadcast] = []
        var broadcastsStart = 0
    }

    private let inner = Mutex(Inner())
    /// At most this many accepted notifications are kept (the oldest are dropped first).
    public let capacity: Int

    /// Channels an app may have at once (APNs: 10,000 per app and environment).
    public let channelLimit: Int

    public init(capacity: Int = 200_000, channelLimit: Int = BroadcastValidator.maximumChannels) {
        self.capacity = max(1, capacity)
        self.channelLimit = max(0, channelLimit)
    }

    @discardableResult
    public func add(_ fault: Fault) -> Int {
        inner.withLock { inner in
            let id = inner.nextFaultID
            inner.nextFaultID += 1
            inner.faults.append((id, fault, fault.count))
            return id
        }
    }

    public func clearFaults() { inner.withLock { $0.faults.removeAll() } }

    /// The first fault that applies to a push to `token` (or a broadcast on `channel`), used up by one.
    func takeFault(for token: String?, channel: String? = nil) -> Fault? {
        inner.withLock { inner in
            guard let index = inner.faults.firstIndex(where: { $0.fault.applies(token: token, channel: channel) }) else { return nil }
            let fault = inner.faults[index].fault
            if let remaining = inner.faults[index].remaining {
                if remaining <= 1 { inner.faults.remove(at: index) } else { inner.faults[index].remaining = remaining - 1 }
            }
            return fault
        }
    }

    func record(_ notification: AcceptedNotification) {
        inner.withLock { inner in
            inner.stats.accepted += 1
            if inner.stats.firstAcceptedAt == nil { inner.stats.firstAcceptedAt = notification.receivedAt }
            inner.stats.lastAcceptedAt = notification.receivedAt
            if inner.recorded.count < capacity {
                inner.recorded.append(notification)
            } else {
                inner.recorded[inner.recordedStart] = notification
                inner.recordedStart = (inner.recordedStart + 1) % capacity
            }
        }
    }

    func rejected(_ rejection: APNsRejection) {
        inner.withLock { $0.stats.rejected["\(rejection.status) \(rejection.reason)", default: 0] += 1 }
    }

    func count(_ update: (inout SimulatorStats) -> Void) { inner.withLock { update(&$0.stats) } }

    func newConnection() -> Int {
        inner.withLock { inner in
            inner.stats.connections += 1
            defer { inner.nextConnection += 1 }
            return inner.nextConnection
        }
    }

    /// `count` accepted notifications in arrival order, after the `from` oldest kept: a page of
    /// them, copied alone (a checker of a million pushes reads them page by page).
    public func notifications(from: Int, count: Int) -> [AcceptedNotification] {
        inner.withLock { inner in
            let kept = inner.recorded.count
            let (first, end) = (min(max(from, 0), kept), min(max(from, 0) + max(count, 0), kept))
            return (first..<end).map { inner.recorded[(inner.recordedStart + $0) % kept] }
        }
    }

    /// Accepted notifications in arrival order (to `token` only, when given), the last `limit`.
    public func notifications(token: String? = nil, limit: Int = .max) -> [AcceptedNotification] {
        let all = inner.withLock { inner in Array(inner.recorded[inner.recordedStart...] + inner.recorded[..<inner.recordedStart]) }
        let matching = token.map { token in all.filter { $0.token == token } } ?? all
        return Array(matching.suffix(limit))
    }

    /// Forgets the accepted pushes and broadcasts and resets the counters (channels stay).
    public func clearNotifications() {
        inner.withLock { inner in
            inner.recorded.removeAll()
            inner.recordedStart = 0
            inner.broadcasts.removeAll()
            inner.broadcastsStart = 0
            inner.stats = SimulatorStats(connections: inner.stats.connections)
        }
    }

    public var stats: SimulatorStats { inner.withLock { $0.stats } }

    // MARK: Broadcast channels

    /// Makes a channel for the app, with a new random id; refused once the app has ``channelLimit``.
    func createChannel(bundleId: String, storagePolicy: Int, now: Date) -> Result<SimulatedChannel, APNsRejection> {
        inner.withLock { inner in
            guard inner.channelsPerApp[bundleId, default: 0] < channelLimit else { return .failure(APNsRejection(400, "CannotCreateChannelConfig")) }
            var id: String
            repeat {
                id = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            } while inner.channels[id] != nil
            let channel = SimulatedChannel(id: id, bundleId: bundleId, storagePolicy: storagePolicy, createdAt: now, subscribers: 0, broadcasts: 0)
            inner.channels[id] = channel
            inner.channelsPerApp[bundleId, default: 0] += 1
            inner.stats.channelsCreated += 1
            return .success(channel)
        }
    }

    /// The app's channel with this id (another app's is not found).
    public func channel(_ id: String, bundleId: String) -> SimulatedChannel? {
        inner.withLock { inner in inner.channels[id].flatMap { $0.bundleId == bundleId ? $0 : nil } }
    }

    /// Deletes the app's channel; `false` when it has none with this id.
    func deleteChannel(_ id: String, bundleId: String) -> Bool {
        inner.withLock { inner in
            guard inner.channels[id]?.bundleId == bundleId else { return false }
            inner.channels[id] = nil
            inner.channelsPerApp[bundleId, default: 1] -= 1
            inner.stats.channelsDeleted += 1
            return true
        }
    }

    /// The app's channels (every app's when `nil`), oldest first.
    public func channels(bundleId: String? = nil) -> [SimulatedChannel] {
        inner.withLock { inner in
            inner.channels.values.filter { bundleId == nil || $0.bundleId == bundleId }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        }
    }

    /// `count` more activities subscribed to the app's channel (a phone that started one with
    /// `input-push-channel`, or simulated ones); `false` when the app has no such channel.
    @discardableResult
    public func subscribe(_ count: Int, to id: String, bundleId: String) -> Bool {
        inner.withLock { inner in
            guard inner.channels[id]?.bundleId == bundleId else { return false }
            inner.channels[id]!.subscribers = max(0, inner.channels[id]!.subscribers + count)
            return true
        }
    }

    func record(_ broadcast: AcceptedBroadcast) {
        inner.withLock { inner in
            inner.channels[broadcast.channelId]?.broadcasts += 1
            inner.stats.broadcasts += 1
            inner.stats.broadcastDeliveries += broadcast.subscribers
            if inner.broadcasts.count < capacity {
                inner.broadcasts.append(broadcast)
            } else {
                inner.broadcasts[inner.broadcastsStart] = broadcast
                inner.broadcastsStart = (inner.broadcastsStart + 1) % capacity
            }
        }
    }

    /// Accepted broadcasts in arrival order (on `channel` only, when given), the last `limit`.
    public func broadcasts(channel: String? = nil, limit: Int = .max) -> [AcceptedBroadcast] {
        let all = inner.withLock { inner in Array(inner.broadcasts[inner.broadcastsStart...] + inner.broadcasts[..<inner.broadcastsStart]) }
        return Array((channel.map { channel in all.filter { $0.channelId == channel } } ?? all).suffix(limit))
    }
}
