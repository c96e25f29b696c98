import IsletMessages
import IsletRuntime
import Metrics

/// content-service's metrics (Prometheus names on /metrics), made once, at start, and handed to
/// each part that counts: making one takes the metrics registry's lock and formats its labels.
/// Labelled counters are ``CounterFamily``s; the two counted for every event (events in by kind,
/// requests by kind and priority) are tables of the known values, looked up without formatting a
/// label (a value outside them is counted by a counter made then).
public struct ContentMetrics: Sendable {
    private let eventsIn: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ActivityEventKind.knownValues.map { ($0.rawValue, Self.eventsInCounter($0.rawValue)) })
    private let refused = Counter(label: "islet_content_events_total", dimensions: [("result", "refused")])
    private let ignored = Counter(label: "islet_content_events_total", dimensions: [("result", "ignored")])
    private let sent = Counter(label: "islet_content_events_total", dimensions: [("result", "sent")])
    private let scheduled = Counter(label: "islet_content_events_total", dimensions: [("result", "scheduled")])
    private let stepsSent = Counter(label: "islet_content_steps_total", dimensions: [("result", "sent")])
    private let stepsDropped = Counter(label: "islet_content_steps_total", dimensions: [("result", "superseded")])
    private let shrinks = Counter(label: "islet_content_shrinks_total")
    private let requests: [String: Counter] = Dictionary(
        uniqueKeysWithValues: (ActivityEventKind.knownValues.map(\.rawValue) + ["widget"]).flatMap { event in
            [5, 10].map { priority in (Self.requestKey(event, priority), Self.requestCounter(event, priority)) }
        })
    private let payloadBytes = Recorder(label: "islet_content_payload_bytes")
    private let restoreSeconds = Gauge(label: "islet_content_memory_restore_seconds")
    private let restored = Counter(label: "islet_content_memory_restored_total")
    private let invalidMemoryRecords = Counter(label: "islet_content_memory_invalid_records_total")
    private let ownRequestsSkipped = Counter(label: "islet_content_memory_own_requests_skipped_total")
    private let forwards = CounterFamily("islet_content_forwarded_total", dimensions: ["to"], known: ["owner found", "known owner", "busy", "unavailable", "no answer", "none"].map { [$0] })
    private let outcomeLookups = CounterFamily("islet_content_outcome_lookups_total", dimensions: ["result"], known: ["read", "busy", "unavailable"].map { [$0] })
    private let thumbnails = CounterFamily("islet_content_thumbnails_total", dimensions: ["result"], known: ["made", "cached", "not_allowed", "failed"].map { [$0] })
    private let thumbnailTime = Timer(label: "islet_content_thumbnail_seconds")
    private let invalidations = CounterFamily("islet_content_invalidations_total", dimensions: ["reason"], known: [InvalidationReason.severelyStale, .lifetimeExceeded].map { [$0.rawValue] })
    private let activityGauges: [String: Gauge] = Dictionary(
        uniqueKeysWithValues: Freshness.allCases.map { ($0.rawValue, Gauge(label: "islet_content_activities", dimensions: [("freshness", $0.rawValue)])) })
    private let startsUnconfirmed = Counter(label: "islet_content_starts_unconfirmed_total")
    private let freshnessActions = CounterFamily("islet_content_freshness_actions_total", dimensions: ["action"], known: ["resend", "end"].map { [$0] })
    private let payloadReads = CounterFamily("islet_content_payloads_read_total", dimensions: ["result"], known: ["read", "lost", "not_now"].map { [$0] })
    private let httpRefusals = CounterFamily(
        "islet_content_http_refused_total", dimensions: ["error"], known:
        [HTTPAPIError.Code.malformedBody, .invalidField, .unauthenticated, .forbidden, .notFound, .conflict, .bodyTooLarge, .unsupportedMediaType,
            .unavailable, .notOwner, .idempotencyKeyReused, .internal].map { [$0.rawValue] })

    public init() {}

    /// `islet_content_events_in_total{event}`: events read.
    func eventIn(_ kind: ActivityEventKind) { (eventsIn[kind.rawValue] ?? Self.eventsInCounter(kind.rawValue)).increment() }
    /// `islet_content_events_total{result}` (and `islet_content_shrinks_total`).
    func eventRefused() { refused.increment() }
    func eventIgnored() { ignored.increment() }
    /// Kept for later (``ActivityEvent/at``).
    func eventScheduled() { scheduled.increment() }
    /// `islet_content_steps_total{result}`: scheduled steps sent at their time, or let go (superseded).
    func stepSent() { stepsSent.increment() }
    func stepDropped() { stepsDropped.increment() }
    func eventSent(shrunk: Bool) {
        sent.increment()
        if shrunk { shrinks.increment() }
    }
    /// `islet_content_requests_total{event,priority}` and `islet_content_payload_bytes`: a push request on Kafka.
    func request(_ request: PushRequest) {
        let event = request.isWidget ? "widget" : request.event.rawValue
        let key = Self.requestKey(event, request.priority)
        (requests[key] ?? Self.requestCounter(event, request.priority)).increment()
        payloadBytes.record(request.payload.utf8.count)
    }

    /// `islet_content_memory_restore_seconds` (the last restore's time) and `islet_content_memory_restored_total`.
    func memoryRestored(seconds: Double, memories: Int) {
        restoreSeconds.record(seconds)
        restored.increment(by: memories)
    }
    /// `islet_content_memory_invalid_records_total`: a changelog or request record read back that did not decode.
    func memoryRecordInvalid() { invalidMemoryRecords.increment() }
    /// `islet_content_memory_own_requests_skipped_total`: requests this process wrote, not decoded again.
    func ownRequestSkipped() { ownRequestsSkipped.increment() }
    /// `islet_content_forwarded_total{to}`: a call about an activity another instance owns.
    func forwarded(to: String) { forwards.increment(to) }
    /// `islet_content_outcome_lookups_total{result}`: `read`, `busy` (refused), `unavailable`.
    func outcomeLookup(_ result: String) { outcomeLookups.increment(result) }
    /// `islet_content_thumbnails_total{result}`: `made`, `cached`, `not_allowed`, `failed`.
    func thumbnail(_ result: String) { thumbnails.increment(result) }
    /// `islet_content_thumbnail_seconds`: the time to fetch and make one.
    func thumbnailMade(in duration: Duration) { thumbnailTime.record(duration: duration) }
    /// `islet_content_invalidations_total{reason}`: tokens token-registry invalidated for the freshness monitor.
    func invalidated(_ reason: InvalidationReason) {
        invalidations.increment(reason.rawValue)
    }
    /// `islet_content_activities{freshness}`: live activities of the partitions owned, by freshness.
    func activities(_ freshness: Freshness, _ count: Int) {
        (activityGauges[freshness.rawValue] ?? Gauge(label: "islet_content_activities", dimensions: [("freshness", freshness.rawValue)])).record(count)
    }
    /// `islet_content_freshness_actions_total{action}`: `resend`, `end`.
    func freshnessAction(_ action: String) { freshnessActions.increment(action) }
    /// `islet_content_starts_unconfirmed_total`: push-to-starts APNs accepted whose activity's
    /// update token did not come in time (their push-to-start token may be stale).
    func startUnconfirmed() { startsUnconfirmed.increment() }
    /// `islet_content_payloads_read_total{result}`: latest payloads read again (`read`), gone (`lost`), to try later (`not_now`).
    func payloadsRead(_ result: String, _ count: Int) {
        payloadReads.increment(result, by: count)
    }

    /// A call to the backends' HTTP API refused, by its error code.
    func httpRefused(_ code: HTTPAPIError.Code) { httpRefusals.increment(code.rawValue) }

    private static func eventsInCounter(_ kind: String) -> Counter { Counter(label: "islet_content_events_in_total", dimensions: [("event", kind)]) }
    private static func requestKey(_ event: String, _ priority: Int) -> String { "\(event)/\(priority)" }
    private static func requestCounter(_ event: String, _ priority: Int) -> Counter {
        Counter(label: "islet_content_requests_total", dimensions: [("event", event), ("priority", "\(priority)")])
    }
}
