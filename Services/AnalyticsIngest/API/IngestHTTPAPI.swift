import Foundation
import Hummingbird
import IsletMessages
import IsletRuntime
import Logging
import NIOCore

/// The app's HTTP/JSON API. No bearer token: what is counted is vouched for by the link's
/// signature, not by the caller. Each request is rate limited per client first.
///
/// | route | does |
/// | --- | --- |
/// | `POST /v1/taps` | one tap: 200 `accepted` / `duplicate`, 422 rejected (the JSON names the reason), 503 retry |
/// | `POST /v1/taps/batch` | up to ``IngestSettings/maxBatch`` taps: 200 with a verdict per tap, 503 if any must be retried |
/// | `POST /bench/noop` | only with ``IngestSettings/benchRoute``: reads the body, answers 204 |
///
/// Requests refused as a whole get an ``IngestAPIError``: 400 `malformedBody`, 413 `bodyTooLarge`
/// or `batchTooLarge`, 415 `unsupportedMediaType`, 429 `rateLimited` (with `Retry-After`).
public struct IngestHTTPAPI<C: Clock>: Sendable where C.Duration == Duration {
    let ingestor: Ingestor
    let limiter: RateLimiter<C>
    let settings: IngestSettings
    let metrics: IngestMetrics
    let logger: Logger

    public init(ingestor: Ingestor, limiter: RateLimiter<C>, settings: IngestSettings, metrics: IngestMetrics, logger: Logger) {
        self.ingestor = ingestor
        self.limiter = limiter
        self.settings = settings
        self.metrics = metrics
        self.logger = logger
    }

    public func addRoutes<Context: RemoteAddressRequestContext>(to router: Router<Context>) {
        router.add(middleware: IngestErrorMiddleware<Context>(metrics: metrics, logger: logger))
        let api = self
        router.post("v1/taps") { request, context -> Response in
            let start = ContinuousClock.now
            try api.admit(request, context: context)
            let tap = try await api.decode(TapInput.self, from: request)
            let result = await api.ingestor.ingest([tap], clientId: api.clientId(request, context: context))[0]
            api.metrics.request(batch: false, ContinuousClock.now - start)
            let status: HTTPResponse.Status =
                switch result.verdict {
                case .accepted, .duplicate: .ok
                case .rejected: .unprocessableContent
                case .unavailable: .serviceUnavailable
                }
            return try json(result, status: status)
        }
        router.post("v1/taps/batch") { request, context -> Response in
            let start = ContinuousClock.now
            try api.admit(request, context: context)
            let batch = try await api.decode(TapBatch.self, from: request)
            try IngestBody.check(batch, maxBatch: api.settings.maxBatch)
            let results = await api.ingestor.ingest(batch.taps, clientId: api.clientId(request, context: context))
            api.metrics.request(batch: true, ContinuousClock.now - start)
            let answer = BatchResult(results: results)
            return try json(answer, status: answer.unavailable > 0 ? .serviceUnavailable : .ok)
        }
        if settings.benchRoute {
            router.post("bench/noop") { request, _ -> Response in
                _ = try await request.body.collect(upTo: api.settings.maxBodyBytes)
                return Response(status: .noContent)
            }
        }
    }

    /// The caller, for rate limiting and the rejected-tap record: an address (see ``IngestSettings/ClientIdentity``).
    func clientId(_ request: Request, context: some RemoteAddressRequestContext) -> String {
        let peer = context.remoteAddress?.ipAddress
        if case .forwardedHeader(let name, let proxies) = settings.clientIdentity {
            let values = request.headers.filter { $0.name.canonicalName == name.lowercased() }.map(\.value)
            return String((proxies.client(peer: peer, forwardedFor: values) ?? "unknown").prefix(64))
        }
        return peer ?? "unknown"
    }

    func admit(_ request: Request, context: some RemoteAddressRequestContext) throws(IngestAPIError) {
        if case .limited(let seconds) = limiter.admit(clientId(request, context: context)) {
            throw IngestAPIError(
                .tooManyRequests, "rateLimited", reason: "too many requests from this client: retry after \(seconds) s", retryAfterSeconds: seconds)
        }
    }

    /// Reads a JSON body of at most ``IngestSettings/maxBodyBytes``.
    func decode<Body: Decodable>(_ type: Body.Type, from request: Request) async throws(IngestAPIError) -> Body {
        guard let contentType = request.headers[.contentType], contentType.lowercased().hasPrefix("application/json") else {
            throw IngestAPIError(.unsupportedMediaType, "unsupportedMediaType", reason: "the body must be application/json")
        }
        let limit = settings.maxBodyBytes
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit { throw IngestAPIError.bodyTooLarge(limit) }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch {
            throw IngestAPIError.bodyTooLarge(limit)
        }
        return try IngestBody.decode(type, from: Array(buffer.readableBytesView))
    }
}

/// A JSON response by Islet's conventions.
func json<Value: Encodable>(_ value: Value, status: HTTPResponse.Status) throws -> Response {
    var headers: HTTPFields = [.contentType: "application/json"]
    if status == .serviceUnavailable { headers[.retryAfter] = "1" }
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try IsletJSON.encode(value))))
}

/// Turns every error of the routes into an ``IngestAPIError`` JSON answer and counts it: the API's
/// own errors as they are, the framework's (no such route, wrong method) by their status,
/// anything else 500 (logged; the body reveals nothing).
struct IngestErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: IngestMetrics
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as IngestAPIError {
            metrics.refused(error.code.rawValue)
            return try error.response(from: request, context: context)
        } catch let error as any HTTPResponseError {
            let apiError: IngestAPIError =
                switch error.status {
                case .notFound: IngestAPIError(.notFound, "notFound", reason: "no such route")
                case .methodNotAllowed: IngestAPIError(.methodNotAllowed, "notFound", reason: "this route does not take \(request.method)")
                case .contentTooLarge: IngestAPIError(.contentTooLarge, "bodyTooLarge", reason: "the body is too large")
                default: IngestAPIError(error.status, "malformedBody", reason: error.status.reasonPhrase)
                }
            metrics.refused(apiError.code.rawValue)
            return try apiError.response(from: request, context: context)
        } catch {
            logger.error("request failed", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            return try IngestAPIError(.internalServerError, "internal", reason: "internal error").response(from: request, context: context)
        }
    }
}
