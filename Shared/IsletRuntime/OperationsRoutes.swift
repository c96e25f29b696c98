import Foundation
import Hummingbird
import Prometheus

/// `/health`, `/health/live` and `/metrics`, added to any Hummingbird router, so a service with
/// its own API serves them on the same port.
public enum OperationsRoutes {
    public static func add<Context: RequestContext>(
        to router: Router<Context>, health: HealthRegistry, metrics: PrometheusCollectorRegistry
    ) {
        // Readiness: 200 when every check is ready, 503 while starting or stopping.
        router.get("/health") { _, _ -> Response in
            let report = health.report()
            return jsonResponse(report, status: report.status == .ready ? .ok : .serviceUnavailable)
        }
        // Liveness: the process answers.
        router.get("/health/live") { _, _ -> Response in
            jsonResponse(["status": "alive"], status: .ok)
        }
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

    static func jsonResponse<Value: Encodable>(_ value: Value, status: HTTPResponse.Status) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
