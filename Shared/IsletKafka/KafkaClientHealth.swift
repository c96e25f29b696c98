/// What a Kafka client can do now: what a service's `/health` reports for it.
///
/// - `ready`: it reached the cluster recently and nothing stops it (for a consumer in a group:
///   the group gave it its partitions, possibly none).
/// - `notReady`: it cannot do its job now but is working on it (the cluster does not answer, the
///   client is being recreated, the group is rebalancing). An orchestrator should send it no work.
/// - `failed`: recovery keeps failing; the process should be restarted.
public struct KafkaClientHealth: Sendable, Equatable, CustomStringConvertible {
    public enum Status: String, Sendable, Equatable {
        case ready, notReady, failed
    }

    public var status: Status
    /// Why it is not ready (`nil` when ready).
    public var reason: String?

    public init(status: Status, reason: String? = nil) {
        self.status = status
        self.reason = reason
    }

    public static let ready = KafkaClientHealth(status: .ready)
    public static func notReady(_ reason: String) -> KafkaClientHealth { KafkaClientHealth(status: .notReady, reason: reason) }
    public static func failed(_ reason: String) -> KafkaClientHealth { KafkaClientHealth(status: .failed, reason: reason) }

    public var description: String { reason.map { "\(status.rawValue): \($0)" } ?? status.rawValue }
}
