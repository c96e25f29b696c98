import Foundation
import Hummingbird
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import UnixSignals

/// What a service executable needs besides its own logic: settings from the environment, a
/// logger, metrics exported on `/metrics`, readiness on `/health`, and a run loop that shuts
/// everything down gracefully on SIGTERM/SIGINT.
///
/// A service's `main` is short (see ``main(serviceName:defaultHTTPPort:config:services:)``):
/// ```swift
/// await ServiceRuntime.main(serviceName: "token-registry", defaultHTTPPort: 8081) { runtime in
///     let producer = try KafkaProducer(configuration: runtime.settings.producerConfiguration(), logger: runtime.logger)
///     return [producer, myService, runtime.httpServer(router: myRouter)]
/// }
/// ```
public struct ServiceRuntime: Sendable {
    public let settings: ServiceSettings
    public let logger: Logger
    public let health: HealthRegistry
    public let metrics: PrometheusCollectorRegistry

    /// For tests: no global bootstrap, nothing read from the environment.
    public init(settings: ServiceSettings, logger: Logger, metrics: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.settings = settings
        self.logger = logger
        self.health = HealthRegistry(service: settings.serviceName)
        self.metrics = metrics
    }

    /// Reads ``ServiceSettings`` from the environment and bootstraps logging (stderr, the
    /// configured level) and metrics (Prometheus) for the process. Call once, from `main`.
    /// A configuration error is printed naming the variable, and thrown.
    public static func bootstrap(
        serviceName: String, defaultHTTPPort: Int, config: IsletConfig = .environment()
    ) throws -> ServiceRuntime {
        let settings: ServiceSettings
        do {
            settings = try ServiceSettings(from: config, serviceName: serviceName, defaultHTTPPort: defaultHTTPPort)
        } catch {
            var stderr = StandardErrorStream()
            print("\(serviceName): \(error)", to: &stderr)
            throw error
        }
        let level = settings.logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        var logger = Logger(label: "islet.\(serviceName)")
        logger.logLevel = level
        return ServiceRuntime(settings: settings, logger: logger, metrics: registry)
    }

    /// The whole `main` of a service executable: ``bootstrap(serviceName:defaultHTTPPort:config:)``,
    /// the service's own setup (`services`: its settings, clients and services), then
    /// ``run(_:)``. An error on the way is printed (a configuration error names its variable) and
    /// the process exits with status 1, instead of trapping on an error thrown from top-level code.
    ///
    /// ```swift
    /// await ServiceRuntime.main(serviceName: "token-registry", defaultHTTPPort: 8081) { runtime in
    ///     try await TokenRegistryApp(runtime: runtime, settings: try RegistrySettings(from: .environment())).services
    /// }
    /// ```
    public static func main(
        serviceName: String, defaultHTTPPort: Int, config: IsletConfig = .environment(),
        services: (ServiceRuntime) async throws -> [any Service]
    ) async -> Never {
        let runtime: ServiceRuntime
        do {
            runtime = try bootstrap(serviceName: serviceName, defaultHTTPPort: defaultHTTPPort, config: config)
        } catch {
            exit(1)  // bootstrap printed it
        }
        let group: [any Service]
        do {
            group = try await services(runtime)
        } catch {
            runtime.logger.critical("\(serviceName) cannot start: \(error)")
            exit(1)
        }
        do {
            try await runtime.run(group)
        } catch let error as ListenerBindError {
            runtime.logger.critical("\(serviceName) \(error)")
            exit(1)
        } catch {
            runtime.logger.critical("\(serviceName) stopped: \(error)")
            exit(1)
        }
        exit(0)
    }

    /// A router with `/health`, `/health/live` and `/metrics`; add the service's own routes to it.
    /// Every error is answered as JSON (``HTTPErrorMiddleware``), an unknown route included.
    public func makeRouter<Context: RequestContext>(context: Context.Type = BasicRequestContext.self) -> Router<Context> {
        let router = Router(context: Context.self)
        router.add(middleware: HTTPErrorMiddleware(logger: logger))
        OperationsRoutes.add(to: router, health: health, metrics: metrics)
        return router
    }

    /// A router for a port that faces phones: `/health`, `/health/ready` and `/health/live` only
    /// (orchestrators probe them there); `/metrics` is on ``operatorServer(router:)``.
    public func makeAppRouter<Context: RequestContext>(context: Context.Type = BasicRequestContext.self) -> Router<Context> {
        let router = Router(context: Context.self)
        router.add(middleware: HTTPErrorMiddleware(logger: logger))
        OperationsRoutes.addHealth(to: router, health: health)
        return router
    }

    /// The operator listener (``ServiceSettings/operatorHost``, ``ServiceSettings/operatorPort``)
    /// with `router` (``makeRouter(context:)`` plus any operator route), as a `Service`.
    public func operatorServer<Responder: HTTPResponder>(router: Responder) -> some Service
    where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        httpServer(
            router: router, host: settings.operatorHost, port: settings.operatorPort, name: "operator",
            variables: ["ISLET_OPERATOR_HOST", "ISLET_OPERATOR_PORT"])
    }

    /// The HTTP server for `router` on the configured host and port, as a `Service`, with the
    /// request deadline and the per-address connection cap of ``ServiceSettings/httpLimits``.
    public func httpServer<Responder: HTTPResponder>(router: Responder) -> some Service
    where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        httpServer(router: router, host: settings.httpHost, port: settings.httpPort, name: "http", variables: ["ISLET_HTTP_HOST", "ISLET_HTTP_PORT"])
    }

    /// `name`: the listener's name in ``ListenerReport`` and in a ``ListenerBindError``.
    private func httpServer<Responder: HTTPResponder>(
        router: Responder, host: String, port: Int, name: String, variables: [String]
    ) -> some Service
    where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
        let limits = settings.httpLimits
        let counts = ConnectionCounts()
        let logger = self.logger
        let application = Application(
            responder: router,
            server: .http1(
                configuration: .init(additionalChannelHandlers: [HTTPConnectionGuard(limits: limits, counts: counts, logger: logger)])),
            configuration: .init(address: .hostname(host, port: port), serverName: settings.serviceName),
            onServerRunning: { channel in ListenerReport.bound(name, port: channel.localAddress?.port) },
            logger: logger)
        return Listener(application, name: name, host: host, port: port, variables: variables)
    }

    /// Runs the services until SIGTERM or SIGINT, then shuts them down gracefully in reverse order
    /// (list producers first and the HTTP server last: the server stops taking requests first, the
    /// producers flush last). `/health` reports `stopping` as soon as shutdown begins. Graceful
    /// shutdown escalates to cancellation after ``ServiceSettings/shutdownTimeout``.
    public func run(_ services: [any Service]) async throws {
        logger.info(
            "starting",
            metadata: ["service": "\(settings.serviceName)", "http.port": "\(settings.httpPort)", "kafka.bootstrap": "\(settings.kafkaBootstrap)"])
        try await makeServiceGroup(services, signals: [.sigterm, .sigint]).run()
        logger.info("stopped", metadata: ["service": "\(settings.serviceName)"])
    }

    /// The group ``run(_:)`` runs; tests trigger its graceful shutdown themselves. `clock`: what
    /// the liveness watchdog measures with (tests move a manual one).
    public func makeServiceGroup<C: Clock>(
        _ services: [any Service], signals: [UnixSignal] = [], clock: C = ContinuousClock()
    ) -> ServiceGroup where C.Duration == Duration {
        var configurations = services.map { ServiceGroupConfiguration.ServiceConfiguration(service: $0) }
        configurations.append(.init(service: ShutdownAnnouncer(health: health, logger: logger), serviceName: "shutdown-announcer"))
        configurations.append(.init(service: FreeMemoryReleaser(clock: clock), serviceName: "free-memory"))
        if settings.livenessExitAfter > .zero {
            configurations.append(
                .init(
                    service: LivenessWatchdog(health: health, exitAfter: settings.livenessExitAfter, clock: clock, logger: logger),
                    serviceName: "liveness-watchdog"))
        }
        var configuration = ServiceGroupConfiguration(
            services: configurations, gracefulShutdownSignals: signals, cancellationSignals: [], logger: logger)
        configuration.maximumGracefulShutdownDuration = settings.shutdownTimeout
        return ServiceGroup(configuration: configuration)
    }
}

/// Started last, so shut down first: marks the service `stopping` the moment shutdown begins.
struct ShutdownAnnouncer: Service {
    let health: HealthRegistry
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        health.markStopping()
        logger.info("graceful shutdown started")
    }
}

/// Stops the service (an error: the process exits with status 1) once `/health/live` has failed for
/// `exitAfter` without a break: a service whose Kafka client cannot be recreated is replaced by its
/// restart policy instead of lingering.
struct LivenessWatchdog<C: Clock>: Service where C.Duration == Duration {
    struct Failure: Error, CustomStringConvertible {
        let reasons: [String: String]
        var description: String {
            "not live: " + reasons.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: "; ")
        }
    }

    let health: HealthRegistry
    let exitAfter: Duration
    var interval: Duration = .seconds(1)
    let clock: C
    let logger: Logger

    func run() async throws {
        var failingSince: C.Instant?
        while (try? await cancelWhenGracefulShutdown { try await clock.sleep(for: interval) }) != nil {
            let liveness = health.liveness()
            guard !liveness.isAlive else {
                failingSince = nil
                continue
            }
            let since = failingSince ?? clock.now
            failingSince = since
            if since.duration(to: clock.now) >= exitAfter {
                let failure = Failure(reasons: liveness.reasons ?? [:])
                logger.critical("the service cannot recover by itself: stopping so that it is restarted", metadata: ["health.live": "\(failure)"])
                throw failure
            }
        }
    }
}

struct StandardErrorStream: TextOutputStream {
    mutating func write(_ string: String) {
        FileHandle.standardError.write(Data(string.utf8))
    }
}
