import IsletMessages
import Metrics

/// analytics-ingest's metrics (Prometheus names on /metrics), created once and reused.
///
/// - `islet_analytics_taps_total{verdict}`: taps by verdict — `accepted`, `duplicate`, `rejected`, `unavailable`.
/// - `islet_analytics_rejected_total{reason}`: rejected taps by reason (`badSignature`, `expired`, …;
///   a reason this code does not know is counted as `other`).
/// - `islet_analytics_refused_requests_total{error}`: requests refused as a whole
///   (`rateLimited`, `bodyTooLarge`, `malformedBody`, `unsupportedMediaType`, `unavailable`, …).
/// - `islet_analytics_request_duration_seconds{route}`: tap requests from arrival to answer
///   (Kafka's acknowledgement included), `route` = `tap` or `batch`.
/// - `islet_analytics_ack_duration_seconds`: the Kafka part of that: publishing a request's records.
public final class IngestMetrics: Sendable {
    private let verdicts: [TapResult.Verdict: Counter]
    private let reasons: [ClickRejectionReason: Counter]
    private let otherReason: Counter
    private let refusals: [String: Counter]
    private let otherRefusal: Counter
    private let unrecordedCounter: Counter
    private let tapLatency: Metrics.Timer
    private let batchLatency: Metrics.Timer
    private let ack: Metrics.Timer

    static let refusalCodes = [
        "rateLimited", "bodyTooLarge", "batchTooLarge", "malformedBody", "unsupportedMediaType", "unavailable", "notFound",
    ]

    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        verdicts = Dictionary(
            uniqueKeysWithValues: [TapResult.Verdict.accepted, .duplicate, .rejected, .unavailable].map {
                ($0, Counter(label: "islet_analytics_taps_total", dimensions: [("verdict", $0.rawValue)], factory: factory))
            })
        reasons = Dictionary(
            uniqueKeysWithValues: ClickRejectionReason.knownValues.map {
                ($0, Counter(label: "islet_analytics_rejected_total", dimensions: [("reason", $0.rawValue)], factory: factory))
            })
        otherReason = Counter(label: "islet_analytics_rejected_total", dimensions: [("reason", "other")], factory: factory)
        refusals = Dictionary(
            uniqueKeysWithValues: Self.refusalCodes.map {
                ($0, Counter(label: "islet_analytics_refused_requests_total", dimensions: [("error", $0)], factory: factory))
            })
        otherRefusal = Counter(label: "islet_analytics_refused_requests_total", dimensions: [("error", "other")], factory: factory)
        unrecordedCounter = Counter(label: "islet_analytics_rejected_unrecorded_total", factory: factory)
        tapLatency = Metrics.Timer(label: "islet_analytics_request_duration_seconds", dimensions: [("route", "tap")], factory: factory)
        batchLatency = Metrics.Timer(label: "islet_analytics_request_duration_seconds", dimensions: [("route", "batch")], factory: factory)
        ack = Metrics.Timer(label: "islet_analytics_ack_duration_seconds", factory: factory)
    }

    func tap(_ result: TapResult) {
        verdicts[result.verdict]?.increment()
        if result.verdict == .rejected, let error = result.error {
            (reasons[ClickRejectionReason(rawValue: error)] ?? otherReason).increment()
        }
    }

    /// A rejected tap past the sample of ``IngestSettings/rejectedPerSecond``: counted, not written.
    func unrecorded() { unrecordedCounter.increment() }

    func refused(_ code: String) {
        (refusals[code] ?? otherRefusal).increment()
    }

    func request(batch: Bool, _ duration: Duration) {
        (batch ? batchLatency : tapLatency).record(duration: duration)
    }

    func acknowledged(_ duration: Duration) {
        ack.record(duration: duration)
    }
}

extension Metrics.Timer {
    func record(duration: Duration) {
        let (seconds, attoseconds) = duration.components
        recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
