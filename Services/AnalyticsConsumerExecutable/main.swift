// analytics-consumer: an example analytics team's consumer of islet.clicks.v1 and
// islet.push-outcomes.v1 (taps per attributes type × surface × element). See docs/analytics.md.
// Any error at start (configuration included) is printed and the process exits with status 1.
import AnalyticsConsumer
import IsletRuntime

await ServiceRuntime.main(serviceName: "analytics-consumer", defaultHTTPPort: 8085) { runtime in
    let settings = try AnalyticsConsumerSettings(from: .environment())
    return try AnalyticsConsumerApp(runtime: runtime, settings: settings).services
}
