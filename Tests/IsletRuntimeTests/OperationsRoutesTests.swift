import Foundation
import Hummingbird
import HummingbirdTesting
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTesting
import Logging
import Metrics
import NIOFoundationCompat
import Prometheus
import ServiceLifecycle
import Synchronization
import Testing

@Suite("/health and /metrics")
struct OperationsRoutesTests {
    func runtime(_ extra: [String: String] = [:]) throws -> ServiceRuntime {
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": "k:1"].merging(extra) { $1 }), serviceName: "test-service", defaultHTTPPort: 0)
        return ServiceRuntime(settings: settings, logger: Logger(label: "test"))
    }

    @Test("every listener answers an unknown route, a wrong method and a failing route with a JSON error, never an empty body")
    func jsonErrors() async throws {
        struct Broken: Error {}
        let runtime = try runtime()
        for router in [runtime.makeRouter(), runtime.makeAppRouter()] {
            router.get("/boom") { _, _ -> Response in throw Broken() }
            try await Application(router: router).test(.router) { client in
                let cases: [(String, HTTPRequest.Method, HTTPResponse.Status, HTTPAPIError.Code)] = [
                    ("/no/such/route", .get, .notFound, .notFound),
                    ("/v1/activities/../../etc/passwd", .get, .notFound, .notFound),
                    ("/health", .post, .notFound, .notFound),  // Hummingbird routes by method and path: no 405
                    ("/boom", .get, .internalServerError, .internal),
                ]
                for (uri, method, status, code) in cases {
                    try await client.execute(uri: uri, method: method) { response in
                        #expect(response.status == status, "\(method) \(uri)")
                        #expect(response.headers[.contentType] == "application/json", "\(method) \(uri)")
                        let body = try JSONDecoder().decode(HTTPAPIError.Body.self, from: Data(buffer: response.body))
                        #expect(body.error == code, "\(method) \(uri)")
                        #expect(!body.reason.contains("Broken"), "a 500 reveals nothing of the error")
                    }
                }
            }
        }
    }

    @Test("/health is 503 while a check is not ready, 200 once all are, 503 again when stopping")
    func readiness() async throws {
        let runtime = try runtime()
        runtime.health.register("kafka-state-rebuilt")
        let app = Application(router: runtime.makeRouter())
        try await app.test(.router) { client in
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
                let report = try JSONDecoder().decode(HealthRegistry.Report.self, from: Data(buffer: response.body))
                #expect(report == .init(service: "test-service", status: .starting, checks: ["kafka-state-rebuilt": .starting]))
            }
            runtime.health.setReady("kafka-state-rebuilt")
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                let report = try JSONDecoder().decode(HealthRegistry.Report.self, from: Data(buffer: response.body))
                #expect(report.status == .ready)
            }
            runtime.health.markStopping()
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
            }
            try await client.execute(uri: "/health/live", method: .get) { response in
                #expect(response.status == .ok)
            }
        }
    }

    @Test("live probes: /health and /health/ready follow them with their reasons; /health/live fails only when one failed")
    func probes() async throws {
        let runtime = try runtime()
        let kafka = Mutex(KafkaClientHealth.notReady("no answer from Kafka for 6.0 s"))
        runtime.health.register("kafka.producer") { kafka.withLock { $0 } }
        let app = Application(router: runtime.makeRouter())
        try await app.test(.router) { client in
            for uri in ["/health", "/health/ready"] {
                try await client.execute(uri: uri, method: .get) { response in
                    #expect(response.status == .serviceUnavailable)
                    let report = try JSONDecoder().decode(HealthRegistry.Report.self, from: Data(buffer: response.body))
                    #expect(report.status == .notReady)
                    #expect(report.checks == ["kafka.producer": .notReady])
                    #expect(report.reasons == ["kafka.producer": "no answer from Kafka for 6.0 s"])
                }
            }
            try await client.execute(uri: "/health/live", method: .get) { response in
                #expect(response.status == .ok, "an unreachable broker is not a reason to restart")
            }
            kafka.withLock { $0 = .ready }
            try await client.execute(uri: "/health/ready", method: .get) { response in
                #expect(response.status == .ok)
            }
            kafka.withLock { $0 = .failed("recreated 5 times in a row without a success") }
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
                let report = try JSONDecoder().decode(HealthRegistry.Report.self, from: Data(buffer: response.body))
                #expect(report.status == .failed)
            }
            try await client.execute(uri: "/health/live", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
                let liveness = try JSONDecoder().decode(HealthRegistry.Liveness.self, from: Data(buffer: response.body))
                #expect(liveness.status == "failed")
                #expect(liveness.reasons == ["kafka.producer": "recreated 5 times in a row without a success"])
            }
        }
    }

    @Test("a service that stays not live past ISLET_LIVENESS_EXIT_AFTER_MS stops with an error (its process exits 1)")
    func livenessWatchdog() async throws {
        let runtime = try runtime(["ISLET_LIVENESS_EXIT_AFTER_MS": "1500"])
        runtime.health.register("kafka.producer") { .failed("recreation keeps failing") }
        let clock = ManualClock()
        let start = clock.date
        let group = runtime.makeServiceGroup([], clock: clock)
        let running = Task { try await group.run() }
        // It looks once a second: not live at 1 s, still not live at 2 s (1 s on: not yet 1.5 s)…
        for second in 1...2 {
            await clock.sleeper(until: start.addingTimeInterval(Double(second)))
            clock.advance(1)
        }
        await clock.sleeper(until: start.addingTimeInterval(3))
        // … and at 3 s, 2 s after it first saw the failure, it stops the service.
        clock.advance(1)
        await #expect(throws: (any Error).self) { try await running.value }
    }

    @Test("/metrics exposes what the service's metrics factory records, in Prometheus text format")
    func metrics() async throws {
        let runtime = try runtime()
        let factory = PrometheusMetricsFactory(registry: runtime.metrics)
        let counter = Counter(label: "islet_test_events_total", dimensions: [("kind", "update")], factory: factory)
        counter.increment(by: 3)
        let app = Application(router: runtime.makeRouter())
        try await app.test(.router) { client in
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/plain") == true)
                let text = String(buffer: response.body)
                #expect(text.contains(#"islet_test_events_total{kind="update"} 3"#))
            }
        }
    }

    @Test("a port that faces phones answers /health but not /metrics (404), which the operator router serves")
    func appRouterHasNoMetrics() async throws {
        let runtime = try runtime()
        try await Application(router: runtime.makeAppRouter()).test(.router) { client in
            for uri in ["/health", "/health/ready", "/health/live"] {
                try await client.execute(uri: uri, method: .get) { response in #expect(response.status == .ok, "\(uri)") }
            }
            try await client.execute(uri: "/metrics", method: .get) { response in #expect(response.status == .notFound) }
        }
        try await Application(router: runtime.makeRouter()).test(.router) { client in
            try await client.execute(uri: "/metrics", method: .get) { response in #expect(response.status == .ok) }
        }
    }

    @Test("the operator listener: loopback and the HTTP port + 100 unless configured; 0 follows an ephemeral HTTP port; never the HTTP port itself")
    func operatorListenerSettings() throws {
        let base = ["ISLET_KAFKA_BOOTSTRAP": "k:1"]
        let defaults = try ServiceSettings(from: .variables(base), serviceName: "s", defaultHTTPPort: 8081)
        #expect(defaults.operatorHost == "127.0.0.1" && defaults.operatorPort == 8181)
        #expect(try ServiceSettings(from: .variables(base), serviceName: "s", defaultHTTPPort: 0).operatorPort == 0)
        let configured = try ServiceSettings(
            from: .variables(base.merging(["ISLET_OPERATOR_HOST": "0.0.0.0", "ISLET_OPERATOR_PORT": "9999"]) { $1 }), serviceName: "s", defaultHTTPPort: 8081)
        #expect(configured.operatorHost == "0.0.0.0" && configured.operatorPort == 9999)
        #expect(throws: ConfigurationError.self) {
            try ServiceSettings(from: .variables(base.merging(["ISLET_OPERATOR_PORT": "8081"]) { $1 }), serviceName: "s", defaultHTTPPort: 8081)
        }
    }

    @Test("over a real HTTP connection: /health, /health/live and /metrics answer")
    func liveServer() async throws {
        let runtime = try runtime()
        runtime.health.register("rebuilt")
        let app = Application(router: runtime.makeRouter(), configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
            }
            runtime.health.setReady("rebuilt")
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/health/live", method: .get) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/nothing-here", method: .get) { response in
                #expect(response.status == .notFound)
            }
        }
    }
}
