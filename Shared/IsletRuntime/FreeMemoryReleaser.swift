import ServiceLifecycle

/// Every service runs it (``ServiceRuntime/makeServiceGroup(_:signals:clock:)``): ``FreeMemory/release()``
/// every `interval` (30 s). A pass costs a walk of malloc's free lists, milliseconds for gigabytes.
struct FreeMemoryReleaser<C: Clock>: Service where C.Duration == Duration {
    var interval: Duration = .seconds(30)
    let clock: C

    func run() async throws {
        while (try? await cancelWhenGracefulShutdown { try await clock.sleep(for: interval) }) != nil {
            FreeMemory.release()
        }
    }
}
