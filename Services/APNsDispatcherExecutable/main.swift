// apns-dispatcher: HTTP/2 to APNs with budgets, coalescing, retries. Configuration: docs/apns-dispatcher.md.
// Any error at start (configuration included) is printed and the process exits with status 1.
import APNsDispatcher
import IsletRuntime

await ServiceRuntime.main(serviceName: "apns-dispatcher", defaultHTTPPort: 8082) { runtime in
    let settings = try DispatcherSettings(from: .environment())
    return try DispatcherApp(runtime: runtime, settings: settings).services
}
