import Foundation
import Synchronization

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
    /// Broadcasts accepted, and the activities they reached in all (each one's subscribers).
    public var broadcasts = 0
    public var broadcastDeliveries = 0
    public var channelsCreated = 0
    public var channelsDeleted = 0
}
