import Foundation
import Hummingbird
import Prometheus

/// `/health` (readiness, also `/health/ready`), `/health/live` and `/metrics`, added to any Hummingbird router, so a service with
/// its own API serves them on the same port.
public enum OperationsRoutes {
    public static func add<Context: RequestContext>(
        to router: Router<Context>, health: HealthRegistry, metrics: PrometheusCollectorRegistry
    ) {
        addHealth(to: router, health: health)
        // Prometheus text exposition format.
        router.get("/metrics") { _, _ -> Response in
            var buffer: [UInt8] = []
            buffer.reserveCapacity(16_384)
            metrics.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
        }
    }

    /// `/health`, `/health/ready` and `/health/live` only (a port that faces phones).
    public static func addHealth<Context: RequestContext>(to router: Router<Context>, health: HealthRegistry) {
        // Readiness: 200 when every check is ready; 503 while starting, not ready, failed or stopping.
        let readiness: @Sendable (Request, Context) async throws -> Response = { _, _ in
            let report = health.report()
            return jsonResponse(report, status: report.status == .ready ? .ok : .serviceUnavailable)
        }
        router.get("/health", use: readiness)
        router.get("/health/ready", use: readiness)
        // Liveness: 200 while the process works and can recover by itself; 503 once recovery
        // keeps failing (restart it).
        router.get("/health/live") { _, _ -> Response in
            let liveness = health.liveness()
            return jsonResponse(liveness, status: liveness.isAlive ? .ok : .serviceUnavailable)
        }
    }

    static func jsonResponse<Value: Encodable>(_ value: Value, status: HTTPResponse.Status) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
