// analytics-ingest: widget taps → verified click events. Configuration: docs/analytics.md.
// Any error at start (configuration included) is printed and the process exits with status 1.
import AnalyticsIngest
import IsletRuntime

await ServiceRuntime.main(serviceName: "analytics-ingest", defaultHTTPPort: 8084) { runtime in
    let settings = try IngestSettings(from: .environment())
    return try AnalyticsIngestApp(runtime: runtime, settings: settings).services
}
