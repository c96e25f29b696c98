import Hummingbird
import Logging

/// Every listener's outermost middleware: whatever a route or the framework throws is answered as
/// an ``HTTPAPIError`` JSON body (an unknown route is a JSON 404, not an empty one); an error that is
/// not an HTTP one is a 500 whose body reveals nothing (it is logged). A service's own API may add
/// its middleware inside this one to count its refusals.
public struct HTTPErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    public init(logger: Logger) { self.logger = logger }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPAPIError {
            return try error.response(from: request, context: context)
        } catch let error as any HTTPResponseError {
            return try HTTPAPIError.framework(error, method: request.method).response(from: request, context: context)
        } catch {
            logger.error("request failed", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            return try HTTPAPIError(.internalServerError, .internal, reason: "internal error").response(from: request, context: context)
        }
    }
}
