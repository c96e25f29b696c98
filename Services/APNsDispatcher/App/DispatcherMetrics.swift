import IsletMessages
import IsletRuntime
import Metrics

/// apns-dispatcher's metrics (Prometheus names on /metrics).
struct DispatcherMetrics: Sendable {
    private let requests = Counter(label: "islet_dispatcher_requests_total")
    private let duplicates = Counter(label: "islet_dispatcher_duplicates_total")
    private let retries = Counter(label: "islet_dispatcher_retries_total")
    private let restamps = Counter(label: "islet_dispatcher_restamped_total")
    private let inFlightGauge = Gauge(label: "islet_dispatcher_in_flight")
    private let sendWindowGauge = Gauge(label: "islet_dispatcher_send_window")
    private let budget = Recorder(label: "islet_dispatcher_budget_remaining", aggregate: true)
    private let latency = Timer(label: "islet_dispatcher_apns_latency_seconds")
    private let invalidBudgetRecords = Counter(label: "islet_dispatch_budget_changelog_invalid_records_total")
    private let transportErrors = CounterFamily("islet_dispatcher_transport_errors_total", dimensions: ["kind"])
    private let lanesStopped = CounterFamily("islet_dispatcher_lane_stopped_total", dimensions: ["team"])
    /// The counters of every answer a push commonly gets, made once (making one takes the
    /// registry's lock and formats its labels), a table looked up by number for every push without
    /// formatting a label: a rarer status is counted by a counter made then.
    private let sends: [Int: Counter] = Dictionary(
        uniqueKeysWithValues: [5, 10].flatMap { priority in
            [200, 400, 403, 404, 405, 410, 413, 429, 500, 503].map { status in (Self.sendKey(status: status, priority: priority), Self.sendCounter(status: status, priority: priority)) }
        })
    private let outcomes = CounterFamily(
        "islet_dispatcher_outcomes_total", dimensions: ["result"], known: PushResult.knownValues.filter(\.isFinal).map { [$0.rawValue] })

    /// `islet_dispatcher_requests_total`: push requests read.
    func received(_ request: PushRequest) { requests.increment() }
    /// `islet_dispatcher_duplicates_total`: requests read again after a restart whose outcome was already published.
    func duplicate() { duplicates.increment() }
    /// `islet_dispatcher_retries_total`.
    func retried() { retries.increment() }
    /// `islet_dispatcher_restamped_total`: newer content sent with a later `aps.timestamp` than its
    /// request's, which was older than one already sent to the activity (two writers within a rebalance).
    func restamped() { restamps.increment() }
    /// `islet_dispatcher_in_flight`: pushes waiting for APNs's answer.
    func inFlight(_ count: Int) { inFlightGauge.record(Double(count)) }
    /// `islet_dispatcher_send_window`: how many pushes may wait for APNs's answer at once now (``SendWindow``).
    func sendWindow(_ size: Int) { sendWindowGauge.record(Double(size)) }
    /// `islet_dispatcher_budget_remaining`: an activity's priority-10 budget after a send that asked for 10.
    func budgetRemaining(_ remaining: Int) { budget.record(Double(remaining)) }

    /// `islet_dispatcher_sends_total{priority,status}` and `islet_dispatcher_apns_latency_seconds`.
    func answer(status: Int, priority: Int, seconds: Double) {
        (sends[Self.sendKey(status: status, priority: priority)] ?? Self.sendCounter(status: status, priority: priority)).increment()
        latency.recordSeconds(seconds)
    }

    private static func sendKey(status: Int, priority: Int) -> Int { priority * 1_000 + status }
    private static func sendCounter(status: Int, priority: Int) -> Counter {
        Counter(label: "islet_dispatcher_sends_total", dimensions: [("priority", "\(priority)"), ("status", "\(status)")])
    }

    /// `islet_dispatcher_transport_errors_total{kind}`: pushes that got no answer.
    func transportError(_ kind: APNsTransportError.Kind?) { transportErrors.increment(kind.map { "\($0)" } ?? "other") }

    /// `islet_dispatcher_outcomes_total{result}`: final outcomes (coalesced and downgraded included).
    func outcome(_ result: PushResult) { outcomes.increment(result.rawValue) }

    /// `islet_dispatch_budget_changelog_invalid_records_total`: budget records read back that did not decode (a bug).
    func budgetRecordInvalid() { invalidBudgetRecords.increment() }

    /// `islet_dispatcher_lane_stopped_total{team}`: APNs refused a team's credentials (alert on it).
    func laneStopped(team: String) { lanesStopped.increment(team) }
}
