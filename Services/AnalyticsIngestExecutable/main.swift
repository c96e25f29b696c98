// analytics-ingest: widget taps → verified click events. Configuration: docs/analytics.md.
import AnalyticsIngest
import IsletRuntime

let runtime = try ServiceRuntime.bootstrap(serviceName: "analytics-ingest", defaultHTTPPort: 8084)
let settings: IngestSettings
do {
    settings = try IngestSettings(from: .environment())
} catch {
    runtime.logger.critical("\(error)")
    throw error
}
let app = try AnalyticsIngestApp(runtime: runtime, settings: settings)
try await runtime.run(app.services)
