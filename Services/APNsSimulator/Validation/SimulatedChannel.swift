import Foundation
import IsletMessages

/// A broadcast channel the simulator holds for an app (iOS 18): what APNs keeps of it, and what
/// the simulator counts.
public struct SimulatedChannel: Sendable, Codable, Equatable {
    /// The id APNs made for it (random, base64).
    public var id: String
    public var bundleId: String
    /// `message-storage-policy`: 0 no message stored, 1 the most recent one stored.
    public var storagePolicy: Int
    public var createdAt: Date
    /// Activities subscribed to it: started by a push with `input-push-channel` naming it, or
    /// added through the admin API (simulated phones).
    public var subscribers: Int
    /// Broadcasts accepted on it.
    public var broadcasts: Int
}
