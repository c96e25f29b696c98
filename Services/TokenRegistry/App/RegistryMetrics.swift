import HTTPTypes
import IsletMessages
import IsletRuntime
import IsletTokens
import Metrics

/// token-registry's metrics (Prometheus names on /metrics). Request latency by route comes from
/// Hummingbird's `MetricsMiddleware` (`http_server_request_duration_seconds`).
struct RegistryMetrics: Sendable {
    /// `islet_registry_changes_total{kind, change}`: registered, claimed, rotated, reactivated, updated, confirmed, invalidated.
    func changed(_ kind: TokenKind, _ change: Change) {
        Counter(label: "islet_registry_changes_total", dimensions: [("kind", kind.rawValue), ("change", change.rawValue)]).increment()
    }

    /// `islet_registry_invalidations_total{reason}`.
    func invalidated(_ reason: InvalidationReason) {
        Counter(label: "islet_registry_invalidations_total", dimensions: [("reason", reason.rawValue)]).increment()
    }

    /// `islet_registry_rejections_total{status, error}`: refused requests.
    func rejected(_ error: APIError) {
        Counter(label: "islet_registry_rejections_total", dimensions: [("status", "\(error.status.code)"), ("error", error.code.rawValue)])
            .increment()
    }

    /// `islet_registry_outcomes_total{decision}`: push outcomes read, and what came of them.
    func outcome(_ decision: String) {
        Counter(label: "islet_registry_outcomes_total", dimensions: [("decision", decision)]).increment()
    }
}
