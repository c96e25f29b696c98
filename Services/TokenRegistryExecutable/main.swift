// token-registry: push tokens and activity lifecycle. Configuration: docs/configuration.md.
import IsletRuntime
import TokenRegistry

let runtime = try ServiceRuntime.bootstrap(serviceName: "token-registry", defaultHTTPPort: 8081)
let settings: RegistrySettings
do {
    settings = try RegistrySettings(from: .environment())
} catch {
    runtime.logger.critical("\(error)")
    throw error
}
let app = try await TokenRegistryApp(runtime: runtime, settings: settings)
try await runtime.run(app.services)
