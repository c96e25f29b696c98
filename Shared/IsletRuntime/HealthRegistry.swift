import IsletKafka
import Synchronization

/// A service's health, in the two answers orchestrators expect.
///
/// - **Readiness** (`/health/ready`, and `/health`): whether the service can do its job now. Made
///   of named checks: those a service sets once (a table rebuilt from Kafka, a listener bound) and
///   live probes it registers (its Kafka producer can send, its consumer reaches the cluster and
///   holds its partitions). 200 only when every check is ready and the service is not stopping.
/// - **Liveness** (`/health/live`): whether the process works and can still recover by itself.
///   503 once a probe reports `failed` (a Kafka client whose recreation keeps failing); the
///   service then also exits after ``ServiceSettings/livenessExitAfter`` so that a restart policy
///   replaces it. A broker that does not answer makes a service not ready, never not live: a
///   restart would not bring the broker back.
public final class HealthRegistry: Sendable {
    public enum Status: String, Sendable, Codable {
        /// A check set once that is not yet ready (a table being rebuilt).
        case starting
        case ready
        /// Graceful shutdown has begun.
        case stopping
        /// A live probe says the service cannot do its job now (it is working on it).
        case notReady = "not_ready"
        /// A live probe says recovery keeps failing: the process should be restarted.
        case failed
    }

    /// What `/health` and `/health/ready` report.
    public struct Report: Sendable, Codable, Equatable {
        public var service: String
        public var status: Status
        /// Each check's state, by name.
        public var checks: [String: Status]
        /// Why each live probe that is not ready is not, by name (`nil` when none has a reason).
        public var reasons: [String: String]?

        public init(service: String, status: Status, checks: [String: Status], reasons: [String: String]? = nil) {
            self.service = service
            self.status = status
            self.checks = checks
            self.reasons = reasons
        }
    }

    /// What `/health/live` reports.
    public struct Liveness: Sendable, Codable, Equatable {
        public var service: String
        /// `alive`, or `failed`.
        public var status: String
        /// The failed probes and why (`nil` when alive).
        public var reasons: [String: String]?

        public var isAlive: Bool { status == "alive" }
    }

    private struct State {
        var checks: [String: Bool] = [:]
        var probes: [String: @Sendable () -> KafkaClientHealth] = [:]
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

    /// Declares a live check: `probe` is asked on every report (keep it cheap and non-blocking,
    /// like ``KafkaProducer/health`` and ``KafkaConsumer/health``).
    public func register(_ check: String, probe: @escaping @Sendable () -> KafkaClientHealth) {
        state.withLock { $0.probes[check] = probe }
    }

    /// From now on the service reports `stopping` (load balancers stop sending it work).
    public func markStopping() {
        state.withLock { $0.stopping = true }
    }

    public var isReady: Bool { report().status == .ready }

    /// Readiness.
    public func report() -> Report {
        let (fixed, probes, stopping) = state.withLock { ($0.checks, $0.probes, $0.stopping) }
        var checks = fixed.mapValues { $0 ? Status.ready : .starting }
        var reasons: [String: String] = [:]
        for (name, probe) in probes {
            let health = probe()
            switch health.status {
            case .ready: checks[name] = .ready
            case .notReady: checks[name] = .notReady
            case .failed: checks[name] = .failed
            }
            if let reason = health.reason { reasons[name] = reason }
        }
        let status: Status
        if stopping {
            status = .stopping
        } else if checks.values.contains(.failed) {
            status = .failed
        } else if checks.values.contains(.starting) {
            status = .starting
        } else if checks.values.contains(.notReady) {
            status = .notReady
        } else {
            status = .ready
        }
        return Report(service: service, status: status, checks: checks, reasons: reasons.isEmpty ? nil : reasons)
    }

    /// Liveness: failed when any live probe says recovery keeps failing.
    public func liveness() -> Liveness {
        let probes = state.withLock { $0.probes }
        var failed: [String: String] = [:]
        for (name, probe) in probes {
            let health = probe()
            if health.status == .failed { failed[name] = health.reason ?? "failed" }
        }
        return Liveness(service: service, status: failed.isEmpty ? "alive" : "failed", reasons: failed.isEmpty ? nil : failed)
    }
}
