// token-registry: push tokens and activity lifecycle. Configuration: docs/configuration.md.
// Any error at start (configuration included) is printed and the process exits with status 1.
import IsletRuntime
import TokenRegistry

await ServiceRuntime.main(serviceName: "token-registry", defaultHTTPPort: 8081) { runtime in
    let settings = try RegistrySettings(from: .environment())
    return try await TokenRegistryApp(runtime: runtime, settings: settings).services
}
