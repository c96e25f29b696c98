import Foundation
import Synchronization

/// A fault the simulator injects into the next matching requests.
public struct Fault: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// Answer with `status` and `reason` (and a 410's `timestampMilliseconds`, default now).
        case reject
        /// Answer normally, `delayMilliseconds` late.
        case delay
        /// Accept and record the notification, but never answer (the client must time out).
        case stall
        /// Send GOAWAY on the request's connection with the previous stream as the last one
        /// processed (this request and any later ones were not), then close the connection.
        case goAway
        /// Close the request's connection at once (a TCP reset, as far as the client can tell).
        case reset
    }

    public var kind: Kind
    /// Only requests to this device token (lowercase hex); `nil`: any request.
    public var token: String?
    public var status: Int?
    public var reason: String?
    public var timestampMilliseconds: Int64?
    public var delayMilliseconds: Int?
    /// How many requests it applies to; `nil`: until the faults are cleared.
    public var count: Int?

    public init(
        kind: Kind, token: String? = nil, status: Int? = nil, reason: String? = nil, timestampMilliseconds: Int64? = nil,
        delayMilliseconds: Int? = nil, count: Int? = 1
    ) {
        self.kind = kind
        self.token = token
        self.status = status
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
        self.delayMilliseconds = delayMilliseconds
        self.count = count
    }

    public static func reject(_ status: Int, _ reason: String, token: String? = nil, count: Int? = 1, timestamp: Date? = nil) -> Fault {
        Fault(
            kind: .reject, token: token, status: status, reason: reason,
            timestampMilliseconds: timestamp.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded(.down)) }, count: count)
    }
}

/// What the simulator counted.
public struct SimulatorStats: Codable, Sendable, Equatable {
    public var accepted = 0
    /// When the first and the latest accepted push arrived (throughput = accepted / the span).
    public var firstAcceptedAt: Date?
    public var lastAcceptedAt: Date?
    /// Refused requests by `"<status> <reason>"`.
    public var rejected: [String: Int] = [:]
    public var connections = 0
    public var goAways = 0
    public var resets = 0
    public var stalled = 0
}

/// The simulator's shared state: faults waiting to be injected, what it accepted, counters.
public final class SimulatorState: Sendable {
    private struct Inner {
        var faults: [(id: Int, fault: Fault, remaining: Int?)] = []
        var nextFaultID = 1
        var recorded: [AcceptedNotification] = []
        var recordedStart = 0  // ring buffer start once full
        var stats = SimulatorStats()
        var nextConnection = 1
    }

    private let inner = Mutex(Inner())
    /// At most this many accepted notifications are kept (the oldest are dropped first).
    public let capacity: Int

    public init(capacity: Int = 200_000) {
        self.capacity = max(1, capacity)
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

    /// The first fault that applies to a request to `token`, used up by one.
    func takeFault(for token: String) -> Fault? {
        inner.withLock { inner in
            guard let index = inner.faults.firstIndex(where: { $0.fault.token == nil || $0.fault.token == token }) else { return nil }
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

    /// Forgets the accepted pushes and resets the counters.
    public func clearNotifications() {
        inner.withLock { inner in
            inner.recorded.removeAll()
            inner.recordedStart = 0
            inner.stats = SimulatorStats(connections: inner.stats.connections)
        }
    }

    public var stats: SimulatorStats { inner.withLock { $0.stats } }
}
