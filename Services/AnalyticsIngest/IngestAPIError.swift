import Foundation
import Hummingbird
import IsletMessages

/// Why a request was refused as a whole (before any tap was judged): an HTTP status and a JSON
/// body with the same shape as a rejected tap's, naming the problem and the field at fault.
///
/// ```json
/// {"error": "rateLimited", "reason": "too many requests from this client: retry after 2 s"}
/// ```
public struct IngestAPIError: Error, HTTPResponseError, Sendable, Equatable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    /// A stable word clients can switch on: `malformedBody`, `bodyTooLarge`, `batchTooLarge`,
    /// `unsupportedMediaType`, `rateLimited`, `unavailable`, `notFound`.
    public var code: String
    public var field: String?
    public var reason: String
    /// For 429 and 503: when to try again, in seconds (`Retry-After`).
    public var retryAfterSeconds: Int?

    public init(_ status: HTTPResponse.Status, _ code: String, field: String? = nil, reason: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.field = field
        self.reason = reason
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(status.code) \(code)\(field.map { " \($0)" } ?? ""): \(reason)" }

    /// The JSON body.
    public struct Body: Codable, Sendable, Equatable {
        public var error: String
        public var field: String?
        public var reason: String
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfterSeconds { headers[.retryAfter] = "\(retryAfterSeconds)" }
        let body = (try? IsletJSON.encode(Body(error: code, field: field, reason: reason))) ?? Array(#"{"error":"internal"}"#.utf8)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func bodyTooLarge(_ limit: Int) -> IngestAPIError {
        IngestAPIError(.contentTooLarge, "bodyTooLarge", reason: "the body must be at most \(limit) bytes")
    }
}
