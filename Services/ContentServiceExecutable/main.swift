// content-service: domain events → ActivityKit payloads. Configuration: docs/templates.md, docs/configuration.md.
import ContentService
import IsletRuntime

let runtime = try ServiceRuntime.bootstrap(serviceName: "content-service", defaultHTTPPort: 8083)
let settings: ContentSettings
do {
    settings = try ContentSettings(from: .environment())
} catch {
    runtime.logger.critical("\(error)")
    throw error
}
let app = try ContentServiceApp(runtime: runtime, settings: settings)
try await runtime.run(app.services)
