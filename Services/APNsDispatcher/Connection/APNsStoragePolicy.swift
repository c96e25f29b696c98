/// What a broadcast channel keeps of the messages sent on it (`message-storage-policy`, fixed when
/// the channel is made).
public enum APNsStoragePolicy: Int, Sendable, Codable, Equatable {
    /// Nothing is stored: a phone offline when a broadcast goes out misses it. APNs allows more
    /// broadcasts on such a channel; every broadcast on it must have `apns-expiration` 0. Scores.
    case noMessageStored = 0
    /// The most recent message is stored (at most 8 hours) for phones that were offline.
    case mostRecentMessageStored = 1
}
