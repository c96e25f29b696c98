// apns-dispatcher: HTTP/2 to APNs with budgets, coalescing, retries. Configuration: docs/apns-dispatcher.md.
import APNsDispatcher
import IsletRuntime

let runtime = try ServiceRuntime.bootstrap(serviceName: "apns-dispatcher", defaultHTTPPort: 8082)
let settings: DispatcherSettings
do {
    settings = try DispatcherSettings(from: .environment())
} catch {
    runtime.logger.critical("\(error)")
    throw error
}
let app = try DispatcherApp(runtime: runtime, settings: settings)
try await runtime.run(app.services)
