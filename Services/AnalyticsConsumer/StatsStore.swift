import Metrics
import IsletMessages
import Synchronization

/// ``ClickStats`` shared between the consumer loop, the reporter and tests, with its metrics.
///
/// - `islet_analytics_consumer_taps_total{app, attributes_type, surface, element}`: taps counted.
/// - `islet_analytics_consumer_delivered_updates{app, attributes_type}`: updates delivered to
///   activities of the app and type (a gauge: an old outcome, without its type, is attributed when
///   its activity's first tap arrives).
/// - `islet_analytics_consumer_taps_per_delivered_update{app, attributes_type, surface, element}`.
///
/// `app` is the bundle id, or `unknown` (``ClickStats/unknownApp``) for a click or an outcome
/// that names none.
/// - `islet_analytics_consumer_unattributed_updates`: delivered to activities without a tap yet.
/// - `islet_analytics_consumer_duplicate_clicks_total`: clicks read again and not counted.
///
/// The gauges are refreshed by ``refreshGauges()`` (the reporter calls it every second).
public final class StatsStore: Sendable {
    private struct State {
        var stats: ClickStats
        var tapCounters: [ClickStats.Cell: Counter] = [:]
        var ratioGauges: [ClickStats.Cell: Gauge] = [:]
        var deliveredGauges: [ClickStats.AppType: Gauge] = [:]
    }

    private let state: Mutex<State>
    private let factory: any MetricsFactory
    private let unattributed: Gauge
    private let duplicates: Counter

    public init(capacity: Int = 100_000, factory: any MetricsFactory = MetricsSystem.factory) {
        state = Mutex(State(stats: ClickStats(capacity: capacity)))
        self.factory = factory
        unattributed = Gauge(label: "islet_analytics_consumer_unattributed_updates", factory: factory)
        duplicates = Counter(label: "islet_analytics_consumer_duplicate_clicks_total", factory: factory)
    }

    public func record(_ click: ClickEvent) {
        let factory = self.factory
        let counted = state.withLock { state -> Bool in
            guard let cell = state.stats.record(click) else { return false }
            let counter =
                state.tapCounters[cell]
                ?? Counter(
                    label: "islet_analytics_consumer_taps_total",
                    dimensions: [("app", cell.app), ("attributes_type", cell.attributesType), ("surface", cell.surface), ("element", cell.element)],
                    factory: factory)
            state.tapCounters[cell] = counter
            counter.increment()
            return true
        }
        if !counted { duplicates.increment() }
    }

    public func record(_ outcome: PushOutcome) {
        _ = state.withLock { $0.stats.record(outcome) }
    }

    /// A copy of the statistics now.
    public var snapshot: ClickStats { state.withLock { $0.stats } }

    /// Sets the gauges from the statistics.
    public func refreshGauges() {
        let factory = self.factory
        let unattributedNow = state.withLock { state -> Int in
            for row in state.stats.rows {
                let gauge =
                    state.ratioGauges[row.cell]
                    ?? Gauge(
                        label: "islet_analytics_consumer_taps_per_delivered_update",
                        dimensions: [
                            ("app", row.cell.app), ("attributes_type", row.cell.attributesType), ("surface", row.cell.surface), ("element", row.cell.element),
                        ],
                        factory: factory)
                state.ratioGauges[row.cell] = gauge
                if let ratio = row.tapsPerDeliveredUpdate { gauge.record(ratio) }
            }
            for (appType, delivered) in state.stats.delivered {
                let gauge =
                    state.deliveredGauges[appType]
                    ?? Gauge(
                        label: "islet_analytics_consumer_delivered_updates", dimensions: [("app", appType.app), ("attributes_type", appType.attributesType)],
                        factory: factory)
                state.deliveredGauges[appType] = gauge
                gauge.record(delivered)
            }
            return state.stats.unattributedDelivered
        }
        unattributed.record(unattributedNow)
    }
}
