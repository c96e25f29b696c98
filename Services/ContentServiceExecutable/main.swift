// content-service: domain events → ActivityKit payloads. Configuration: docs/templates.md, docs/configuration.md.
// Any error at start (configuration included) is printed and the process exits with status 1.
import ContentService
import IsletRuntime

await ServiceRuntime.main(serviceName: "content-service", defaultHTTPPort: 8083) { runtime in
    let settings = try ContentSettings(from: .environment())
    return try ContentServiceApp(runtime: runtime, settings: settings).services
}
