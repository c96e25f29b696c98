import IsletMessages
import Metrics

/// content-service's metrics on the path of every event and request (Prometheus names on
/// /metrics), made once: making one takes the metrics registry's lock and formats its labels. An
/// event kind or priority outside the known ones is counted by a counter made then.
struct ContentMetrics: Sendable {
    private let eventsIn: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ActivityEventKind.knownValues.map { ($0.rawValue, Self.eventsInCounter($0.rawValue)) })
    private let refused = Counter(label: "islet_content_events_total", dimensions: [("result", "refused")])
    private let ignored = Counter(label: "islet_content_events_total", dimensions: [("result", "ignored")])
    private let sent = Counter(label: "islet_content_events_total", dimensions: [("result", "sent")])
    private let shrinks = Counter(label: "islet_content_shrinks_total")
    private let requests: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ActivityEventKind.knownValues.flatMap { kind in
            [5, 10].map { priority in (Self.requestKey(kind.rawValue, priority), Self.requestCounter(kind.rawValue, priority)) }
        })
    private let payloadBytes = Recorder(label: "islet_content_payload_bytes")

    /// `islet_content_events_in_total{event}`: events read.
    func eventIn(_ kind: ActivityEventKind) { (eventsIn[kind.rawValue] ?? Self.eventsInCounter(kind.rawValue)).increment() }
    /// `islet_content_events_total{result}` (and `islet_content_shrinks_total`).
    func eventRefused() { refused.increment() }
    func eventIgnored() { ignored.increment() }
    func eventSent(shrunk: Bool) {
        sent.increment()
        if shrunk { shrinks.increment() }
    }
    /// `islet_content_requests_total{event,priority}` and `islet_content_payload_bytes`: a push request on Kafka.
    func request(_ request: PushRequest) {
        let key = Self.requestKey(request.event.rawValue, request.priority)
        (requests[key] ?? Self.requestCounter(request.event.rawValue, request.priority)).increment()
        payloadBytes.record(request.payload.utf8.count)
    }

    private static func eventsInCounter(_ kind: String) -> Counter { Counter(label: "islet_content_events_in_total", dimensions: [("event", kind)]) }
    private static func requestKey(_ event: String, _ priority: Int) -> String { "\(event)/\(priority)" }
    private static func requestCounter(_ event: String, _ priority: Int) -> Counter {
        Counter(label: "islet_content_requests_total", dimensions: [("event", event), ("priority", "\(priority)")])
    }
}
