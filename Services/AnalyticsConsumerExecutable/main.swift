// analytics-consumer: an example analytics team's consumer of islet.clicks.v1 and
// islet.push-outcomes.v1 (taps per attributes type × surface × element). See docs/analytics.md.
import AnalyticsConsumer
import IsletRuntime

let runtime = try ServiceRuntime.bootstrap(serviceName: "analytics-consumer", defaultHTTPPort: 8085)
let settings: AnalyticsConsumerSettings
do {
    settings = try AnalyticsConsumerSettings(from: .environment())
} catch {
    runtime.logger.critical("\(error)")
    throw error
}
let app = try AnalyticsConsumerApp(runtime: runtime, settings: settings)
try await runtime.run(app.services)
