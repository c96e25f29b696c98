import Synchronization

/// Readiness of a service: named checks that each become ready (Kafka state rebuilt, a listener
/// bound, …). `/health` answers 200 only when every check is ready and the service is not stopping.
public final class HealthRegistry: Sendable {
    public enum Status: String, Sendable, Codable {
        case starting, ready, stopping
    }

    /// What `/health` reports.
    public struct Report: Sendable, Codable, Equatable {
        public var service: String
        public var status: Status
        /// Each check's state, by name.
        public var checks: [String: Status]

        public init(service: String, status: Status, checks: [String: Status]) {
            self.service = service
            self.status = status
            self.checks = checks
        }
    }

    private struct State {
        var checks: [String: Bool] = [:]
        var stopping = false
    }

    public let service: String
    private let state = Mutex(State())

    public init(service: String) {
        self.service = service
    }

    /// Declares a check, not ready yet.
    public func register(_ check: String) {
        state.withLock { $0.checks[check] = $0.checks[check] ?? false }
    }

    public func setReady(_ check: String, _ ready: Bool = true) {
        state.withLock { $0.checks[check] = ready }
    }

    /// From now on the service reports `stopping` (load balancers stop sending it work).
    public func markStopping() {
        state.withLock { $0.stopping = true }
    }

    public var isReady: Bool { report().status == .ready }

    public func report() -> Report {
        state.withLock { state in
            let status: Status =
                state.stopping ? .stopping : (state.checks.values.allSatisfy { $0 } ? .ready : .starting)
            return Report(
                service: service, status: status,
                checks: state.checks.mapValues { $0 ? .ready : .starting })
        }
    }
}
