import Foundation
import Hummingbird
import IsletMessages
import Logging
import NIOCore

/// Why a request to one of Islet's public HTTP APIs (token-registry's, analytics-ingest's) was
/// refused: an HTTP status and a JSON body that names the problem, and the field at fault when
/// there is one.
///
/// ```json
/// {"error": "invalidField", "field": "token", "reason": "must be even-length hex (got 63 characters)"}
/// ```
///
/// A 401 carries `WWW-Authenticate: Bearer`; a 503 `Retry-After` (1 s unless the error says);
/// a 429 `Retry-After` when the error says when to come back.
public struct HTTPAPIError: Error, HTTPResponseError, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as a stable word clients can switch on.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable, ExpressibleByStringLiteral {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }

        /// The body is not JSON, or not the expected shape (a wrong type, a missing field).
        public static let malformedBody: Code = "malformedBody"
        /// A field (or path parameter) breaks a rule.
        public static let invalidField: Code = "invalidField"
        /// No bearer JWT, or one that does not verify (bad signature, expired, unknown key).
        public static let unauthenticated: Code = "unauthenticated"
        /// The resource belongs to another user.
        public static let forbidden: Code = "forbidden"
        /// Nothing of the caller's by that name (or no such route).
        public static let notFound: Code = "notFound"
        /// The change cannot be made in the resource's state (e.g. the activity has ended).
        public static let conflict: Code = "conflict"
        /// The activity has ended: there is nothing to show any more, and it must not be started.
        public static let ended: Code = "ended"
        /// The user holds as many live activities (or push-to-start tokens) as allowed: end one first.
        public static let quotaExceeded: Code = "quotaExceeded"
        /// The body is larger than the service accepts.
        public static let bodyTooLarge: Code = "bodyTooLarge"
        /// A batch holds more items than the service accepts.
        public static let batchTooLarge: Code = "batchTooLarge"
        /// The body is not `application/json`.
        public static let unsupportedMediaType: Code = "unsupportedMediaType"
        /// Too many requests from this client: retry after `Retry-After` seconds.
        public static let rateLimited: Code = "rateLimited"
        /// The service cannot take the request now (Kafka did not acknowledge it, or its state is
        /// still being rebuilt); nothing was changed. Retry later.
        public static let unavailable: Code = "unavailable"
        /// What was asked for lives on another instance of the service (the one that owns its
        /// Kafka partition): ask that instance.
        public static let notOwner: Code = "notOwner"
        /// An `Idempotency-Key` used again for a different request (another path or body).
        public static let idempotencyKeyReused: Code = "idempotencyKeyReused"
        /// Something failed inside the service (logged there; the body reveals nothing).
        public static let `internal`: Code = "internal"
    }

    public var status: HTTPResponse.Status
    public var code: Code
    /// The field at fault, as a dotted path (`app.bundleId`), when there is one.
    public var field: String?
    public var reason: String
    /// When to try again, in seconds (`Retry-After`).
    public var retryAfterSeconds: Int?

    public init(_ status: HTTPResponse.Status, _ code: Code, field: String? = nil, reason: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.field = field
        self.reason = reason
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String { "\(status.code) \(code.rawValue)\(field.map { " \($0)" } ?? ""): \(reason)" }

    /// The JSON body.
    public struct Body: Codable, Sendable, Equatable {
        public var error: Code
        public var field: String?
        public var reason: String
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        if status == .unauthorized { headers[.wwwAuthenticate] = "Bearer" }
        if let seconds = retryAfterSeconds ?? (status == .serviceUnavailable ? 1 : nil) { headers[.retryAfter] = "\(seconds)" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: jsonBody)))
    }

    /// The JSON body of the answer.
    public var jsonBody: [UInt8] {
        (try? IsletJSON.encode(Body(error: code, field: field, reason: reason))) ?? Array(#"{"error":"internal"}"#.utf8)
    }

    /// The body is larger than `limit` bytes.
    public static func bodyTooLarge(_ limit: Int) -> HTTPAPIError {
        HTTPAPIError(.contentTooLarge, .bodyTooLarge, reason: "the body must be at most \(limit) bytes")
    }

    /// The answer for an error the framework threw (no such route, a method the route does not
    /// take, a body too large for the server) by its status.
    public static func framework(_ error: any HTTPResponseError, method: HTTPRequest.Method) -> HTTPAPIError {
        switch error.status {
        case .notFound: HTTPAPIError(.notFound, .notFound, reason: "no such route")
        case .methodNotAllowed: HTTPAPIError(.methodNotAllowed, .notFound, reason: "this route does not take \(method)")
        case .contentTooLarge: HTTPAPIError(.contentTooLarge, .bodyTooLarge, reason: "the body is too large")
        default: HTTPAPIError(error.status, .malformedBody, reason: error.status.reasonPhrase)
        }
    }
}
