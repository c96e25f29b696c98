import HTTPTypes
import IsletMessages
import IsletRuntime
import IsletTokens
import Metrics

/// token-registry's metrics (Prometheus names on /metrics). Request latency by route comes from
/// Hummingbird's `MetricsMiddleware` (`http_server_request_duration_seconds`).
struct RegistryMetrics: Sendable {
    private let changes = CounterFamily("islet_registry_changes_total", dimensions: ["kind", "change"])
    private let invalidations = CounterFamily("islet_registry_invalidations_total", dimensions: ["reason"])
    private let rejections = CounterFamily("islet_registry_rejections_total", dimensions: ["status", "error"])
    private let outcomes = CounterFamily("islet_registry_outcomes_total", dimensions: ["decision"])

    /// `islet_registry_changes_total{kind, change}`: registered, claimed, rotated, reactivated, updated, confirmed, invalidated.
    func changed(_ kind: TokenKind, _ change: Change) { changes.increment(kind.rawValue, change.rawValue) }

    /// `islet_registry_invalidations_total{reason}`.
    func invalidated(_ reason: InvalidationReason) { invalidations.increment(reason.rawValue) }

    /// `islet_registry_rejections_total{status, error}`: refused requests.
    func rejected(_ error: APIError) { rejections.increment("\(error.status.code)", error.code.rawValue) }

    /// `islet_registry_outcomes_total{decision}`: push outcomes read, and what came of them.
    func outcome(_ decision: String) { outcomes.increment(decision) }
}
