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
    /// Only pushes to this device token (lowercase hex); `nil`: any push (and, without `channel`,
    /// any broadcast).
    public var token: String?
    /// Only broadcasts on this channel; `nil`: any broadcast (without `token`). Channel management
    /// requests get no faults.
    public var channel: String?
    public var status: Int?
    public var reason: String?
    public var timestampMilliseconds: Int64?
    public var delayMilliseconds: Int?
    /// How many requests it applies to; `nil`: until the faults are cleared.
    public var count: Int?

    public init(
        kind: Kind, token: String? = nil, status: Int? = nil, reason: String? = nil, timestampMilliseconds: Int64? = nil,
        delayMilliseconds: Int? = nil, count: Int? = 1, channel: String? = nil
    ) {
        self.kind = kind
        self.token = token
        self.channel = channel
        self.status = status
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
        self.delayMilliseconds = delayMilliseconds
        self.count = count
    }

    public static func reject(
        _ status: Int, _ reason: String, token: String? = nil, count: Int? = 1, timestamp: Date? = nil, channel: String? = nil
    ) -> Fault {
        Fault(
            kind: .reject, token: token, status: status, reason: reason,
            timestampMilliseconds: timestamp.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded(.down)) }, count: count, channel: channel)
    }

    /// Whether it applies to a push to `token`, or (`token` nil) a broadcast on `channel`.
    func applies(token: String?, channel: String?) -> Bool {
        if let token { return self.channel == nil && (self.token == nil || self.token == token) }
        return self.token == nil && (self.channel == nil || self.channel == channel)
    }
}
