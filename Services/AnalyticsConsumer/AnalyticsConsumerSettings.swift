import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import Logging
import Prometheus
import ServiceLifecycle

/// analytics-consumer's own settings (besides ``ServiceSettings``), from the environment.
public struct AnalyticsConsumerSettings: Sendable {
    /// `ISLET_ANALYTICS_GROUP` (default `analytics-consumer`): the consumer group. Instances of one
    /// group share the partitions (each counts its share); another group reads everything again.
    public var group: String
    /// `ISLET_ANALYTICS_REPORT_INTERVAL_MS` (default 10000): how often the table is printed.
    public var reportInterval: Duration
    /// `ISLET_ANALYTICS_STATS_CAPACITY` (default 100000): cells, activities and ids remembered at most.
    public var capacity: Int

    public init(group: String = "analytics-consumer", reportInterval: Duration = .seconds(10), capacity: Int = 100_000) {
        self.group = group
        self.reportInterval = reportInterval
        self.capacity = capacity
    }

    public init(from config: IsletConfig) throws(ConfigurationError) {
        self.init(
            group: try config.string("islet.analytics.group", default: "analytics-consumer"),
            reportInterval: try config.milliseconds("islet.analytics.report.interval.ms", default: .seconds(10)),
            capacity: try config.int("islet.analytics.stats.capacity", default: 100_000, range: 1...10_000_000))
    }
}
