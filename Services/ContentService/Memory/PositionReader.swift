import Logging

/// Where records are read again by their position: a topic of a cluster, read by a replica of
/// its own for at most `timeout` each time (the latest payloads the freshness monitor re-sends,
/// the outcomes a lookup reports).
struct PositionReader: Sendable {
    let bootstrapServers: String
    let topic: String
    let settings: [String: String]
    let clientID: String
    let timeout: Duration
    let logger: Logger
}
