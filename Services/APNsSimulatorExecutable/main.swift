// apns-simulator: an APNs provider API over HTTP/2 + TLS for development, tests and benchmarks.
// Configuration: docs/apns-simulator.md.
import APNsSimulator
import Foundation
import Hummingbird
import IsletRuntime
import Logging
import ServiceLifecycle
import UnixSignals

LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
var logger = Logger(label: "islet.apns-simulator")
logger.logLevel = Logger.Level(rawValue: ProcessInfo.processInfo.environment["ISLET_LOG_LEVEL"] ?? "info") ?? .info

let settings: SimulatorSettings
do {
    settings = try SimulatorSettings(from: .environment())
} catch {
    logger.critical("\(error)")
    exit(1)
}
do {
    if let path = settings.certificateOut {
        try settings.tls.certificatePEM.write(toFile: path, atomically: true, encoding: .utf8)
    }
    let state = SimulatorState(capacity: settings.recordCapacity)
    for fault in settings.faults { state.add(fault) }
    let server = APNsSimulatorServer(
        configuration: .init(
            host: settings.host, port: settings.port, keys: settings.keys, tls: settings.tls, maxConcurrentStreams: settings.maxConcurrentStreams,
            environment: settings.environment),
        state: state, logger: logger)
    let router = Router()
    SimulatorAdminAPI.addRoutes(to: router, state: state, certificatePEM: settings.tls.certificatePEM)
    let admin = Application(
        router: router, configuration: .init(address: .hostname(settings.adminHost, port: settings.adminPort)),
        onServerRunning: { channel in ListenerReport.bound("http", port: channel.localAddress?.port) }, logger: logger)
    Task { ListenerReport.bound("apns", port: try? await server.listeningPort) }
    try await ServiceGroup(
        configuration: .init(
            services: [
                .init(
                    service: Listener(
                        server, name: "apns", host: settings.host, port: settings.port, variables: ["ISLET_SIMULATOR_HOST", "ISLET_SIMULATOR_PORT"])),
                .init(
                    service: Listener(admin, name: "http", host: settings.adminHost, port: settings.adminPort, variables: ["ISLET_HTTP_HOST", "ISLET_HTTP_PORT"])),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
    ).run()
} catch let error as ListenerBindError {
    logger.critical("apns-simulator \(error)")
    exit(1)
} catch {
    // Printed, and exit status 1 (an error thrown from top-level code would trap).
    logger.critical("apns-simulator stopped: \(error)")
    exit(1)
}
