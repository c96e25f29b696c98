import Foundation
import Hummingbird
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging

/// The app's HTTP/JSON API. Every route needs a bearer JWT; every refusal is an ``APIError``
/// (a 4xx, or 503, with a JSON body naming the problem), and a refused request writes nothing.
///
/// | route | does |
/// | --- | --- |
/// | `PUT /v1/activities/{activityId}/token` | register or rotate the activity's update token |
/// | `GET /v1/activities/{activityId}[?bundleId=]` | the activity's token state (never the token) |
/// | `GET /v1/activities/{activityId}/content?bundleId=` | the content the activity shows now, for an app that starts it only with real data (``FirstContent``; the activity's ticket in `Islet-Activity-Ticket`) |
/// | `POST /v1/activities/{activityId}/invalidate` | the activity ended / was dismissed / is ineligible |
/// | `PUT /v1/activities/{activityId}/frequent-updates` | the user changed the frequent-updates setting |
/// | `PUT /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}` | register or rotate a push-to-start token |
/// | `GET /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}` | its state |
/// | `POST /v1/apps/{bundleId}/devices/{deviceId}/push-to-start/{attributesType}/invalidate` | stop using it |
/// | `PUT /v1/apps/{bundleId}/devices/{deviceId}/widgets/{kind}` | register or rotate the WidgetKit push token for widgets of `kind` |
/// | `GET /v1/apps/{bundleId}/devices/{deviceId}/widgets/{kind}` | its state |
/// | `POST /v1/apps/{bundleId}/devices/{deviceId}/widgets/{kind}/invalidate` | stop using it |
public struct RegistryHTTPAPI: Sendable {
    let registry: Registry
    let authenticator: Authenticator
    let maxBodyBytes: Int
    let logger: Logger
    /// Where an app reads an announced activity's content; `nil`: that route answers 501.
    let firstContent: FirstContent?

    public init(registry: Registry, authenticator: Authenticator, maxBodyBytes: Int, logger: Logger, firstContent: FirstContent? = nil) {
        self.registry = registry
        self.authenticator = authenticator
        self.maxBodyBytes = maxBodyBytes
        self.logger = logger
        self.firstContent = firstContent
    }

    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        // On the router, not the group: unknown routes get the same JSON answers.
        router.add(middleware: APIErrorMiddleware<Context>(logger: logger, metrics: registry.metrics))
        let api = router.group("v1")
        let (registry, authenticator, maxBodyBytes) = (self.registry, self.authenticator, self.maxBodyBytes)

        api.put("activities/:activityId/token") { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(RegisterActivityTokenRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            let result = try await registry.registerActivityToken(user: user, activityId: try context.parameter("activityId"), body)
            return try json(result, status: [.registered, .claimed].contains(result.change) ? .created : .ok)
        }
        // Activity ids are scoped per app: `?bundleId=` names the app; without it, the caller's
        // only activity of that id (409 when the caller has it in several apps).
        api.get("activities/:activityId") { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            return try json(
                try registry.activity(user: user, activityId: try context.parameter("activityId"), bundleId: request.bundleIdParameter))
        }
        let firstContent = self.firstContent
        api.get("activities/:activityId/content") { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            guard let firstContent else {
                throw APIError(
                    .notImplemented, .unavailable,
                    reason: "this registry serves no activity content (its operator has not set ISLET_CONTENT_HTTP): start the activity from your backend's own data")
            }
            let body = try await firstContent.content(
                user: user, activityId: try context.parameter("activityId"), bundleId: request.bundleIdParameter,
                ticket: request.headers[FirstContent.ticketHeader])
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        api.post("activities/:activityId/invalidate") { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(InvalidateRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            return try json(
                try await registry.invalidateActivity(
                    user: user, activityId: try context.parameter("activityId"), bundleId: request.bundleIdParameter, deviceId: body.deviceId,
                    reason: body.reason))
        }
        api.put("activities/:activityId/frequent-updates") { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(FrequentUpdatesRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            return try json(
                try await registry.setFrequentUpdates(
                    user: user, activityId: try context.parameter("activityId"), bundleId: request.bundleIdParameter, deviceId: body.deviceId,
                    enabled: body.enabled))
        }
        addPushToStartRoutes(to: api)
        addWidgetRoutes(to: api)
    }

    /// A device's WidgetKit push token, per widget kind.
    private func addWidgetRoutes<Context: RequestContext>(to api: RouterGroup<Context>) {
        let (registry, authenticator, maxBodyBytes) = (self.registry, self.authenticator, self.maxBodyBytes)
        let widgets = "apps/:bundleId/devices/:deviceId/widgets/:kind"
        api.put(RouterPath(widgets)) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(RegisterWidgetTokenRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            let result = try await registry.registerWidgetToken(
                user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                kind: try context.parameter("kind"), body)
            return try json(result, status: result.change == .registered ? .created : .ok)
        }
        api.get(RouterPath(widgets)) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            return try json(
                try registry.widget(
                    user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                    kind: try context.parameter("kind")))
        }
        api.post(RouterPath(widgets + "/invalidate")) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(InvalidateRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            return try json(
                try await registry.invalidateWidget(
                    user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                    kind: try context.parameter("kind"), reason: body.reason))
        }
    }

    /// A device's push-to-start tokens, per attributes type.
    private func addPushToStartRoutes<Context: RequestContext>(to api: RouterGroup<Context>) {
        let (registry, authenticator, maxBodyBytes) = (self.registry, self.authenticator, self.maxBodyBytes)
        let pushToStart = "apps/:bundleId/devices/:deviceId/push-to-start/:attributesType"
        api.put(RouterPath(pushToStart)) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(RegisterPushToStartTokenRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            let result = try await registry.registerPushToStartToken(
                user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                attributesType: try context.parameter("attributesType"), body)
            return try json(result, status: result.change == .registered ? .created : .ok)
        }
        api.get(RouterPath(pushToStart)) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            return try json(
                try registry.pushToStart(
                    user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                    attributesType: try context.parameter("attributesType")))
        }
        api.post(RouterPath(pushToStart + "/invalidate")) { request, context -> Response in
            let user = try await authenticator.user(authorization: request.headers[.authorization])
            let body = try await HTTPJSON.decode(InvalidateRequest.self, from: request, maxBodyBytes: maxBodyBytes)
            return try json(
                try await registry.invalidatePushToStart(
                    user: user, bundleId: try context.parameter("bundleId"), deviceId: try context.parameter("deviceId"),
                    attributesType: try context.parameter("attributesType"), reason: body.reason))
        }
    }
}

extension Request {
    /// The `bundleId` query parameter: the app of the activity in the path.
    var bundleIdParameter: String? { uri.queryParameters.get("bundleId") }
}

extension RequestContext {
    /// A path parameter (the router guarantees it is there).
    func parameter(_ name: String) throws(APIError) -> String {
        guard let value = parameters.get(name) else { throw APIError.invalid(name, "is missing from the path") }
        return value
    }
}

/// A JSON response by Islet's conventions (``HTTPJSON/response(_:status:headers:)``).
func json<Value: Encodable>(_ value: Value, status: HTTPResponse.Status = .ok) throws -> Response {
    try HTTPJSON.response(value, status: status)
}

/// Turns every error of the API's routes into an ``APIError`` JSON answer: the API's own errors as
/// they are, the framework's (no such route, wrong method) by their status, anything else 500
/// (logged; the body reveals nothing).
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger
    /// The registry's (one set of metrics per service).
    let metrics: RegistryMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            metrics.rejected(error)
            return try error.response(from: request, context: context)
        } catch let error as any HTTPResponseError {
            let apiError = APIError.framework(error, method: request.method)
            metrics.rejected(apiError)
            return try apiError.response(from: request, context: context)
        } catch {
            logger.error("request failed", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            return try APIError(.internalServerError, .unavailable, reason: "internal error").response(from: request, context: context)
        }
    }
}
