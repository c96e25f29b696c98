import Foundation
import IsletMessages

/// A broadcast the simulator accepted: what every subscribed phone would have received.
public struct AcceptedBroadcast: Sendable, Codable, Equatable {
    public var channelId: String
    public var bundleId: String
    /// `apns-request-id`, as sent or made by the simulator.
    public var requestId: String
    /// The `apns-unique-id` it was answered with (APNs answers a broadcast's 200 with one).
    public var uniqueID: String
    public var priority: Int
    public var expiration: Int64
    /// `aps.event`: update or end (a broadcast can never start).
    public var event: String
    /// `aps.timestamp`.
    public var timestamp: Int64
    public var payload: String
    public var payloadBytes: Int
    /// The activities it reached: the channel's subscribers when it arrived.
    public var subscribers: Int
    public var receivedAt: Date
    public var connection: Int
}
