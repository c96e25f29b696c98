import Foundation
import Hummingbird
import IsletMessages

/// Why a request was refused: an HTTP status and a JSON body that names the problem, and the
/// field at fault when there is one.
///
/// ```json
/// {"error": "invalidField", "field": "token", "reason": "must be even-length hex (got 63 characters)"}
/// ```
public struct APIError: Error, HTTPResponseError, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as a stable word clients can switch on.
    public struct Code: RawRepresentable, Hashable, Sendable, Codable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The body is not JSON, or not the expected shape (a wrong type, a missing field).
        public static let malformedBody = Code(rawValue: "malformedBody")
        /// A field (or path parameter) breaks a rule.
        public static let invalidField = Code(rawValue: "invalidField")
        /// No bearer JWT, or one that does not verify (bad signature, expired, unknown key).
        public static let unauthenticated = Code(rawValue: "unauthenticated")
        /// The resource belongs to another user.
        public static let forbidden = Code(rawValue: "forbidden")
        /// Nothing of the caller's by that name.
        public static let notFound = Code(rawValue: "notFound")
        /// The change cannot be made in the resource's state (e.g. the activity has ended).
        public static let conflict = Code(rawValue: "conflict")
        /// The user holds as many live activities (or push-to-start tokens) as allowed: end one first.
        public static let quotaExceeded = Code(rawValue: "quotaExceeded")
        /// The body is larger than the service accepts.
        public static let bodyTooLarge = Code(rawValue: "bodyTooLarge")
        /// The body is not `application/json`.
        public static let unsupportedMediaType = Code(rawValue: "unsupportedMediaType")
        /// The service cannot take the change now (Kafka did not acknowledge it, or the token table
        /// is still being rebuilt); nothing was changed. Retry later.
        public static let unavailable = Code(rawValue: "unavailable")
    }

    public var status: HTTPResponse.Status
    public var code: Code
    /// The field at fault, as a dotted path (`app.bundleId`), when there is one.
    public var field: String?
    public var reason: String

    public init(_ status: HTTPResponse.Status, _ code: Code, field: String? = nil, reason: String) {
        self.status = status
        self.code = code
        self.field = field
        self.reason = reason
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
        if status == .serviceUnavailable { headers[.retryAfter] = "1" }
        let body = (try? IsletJSON.encode(Body(error: code, field: field, reason: reason))) ?? Array(#"{"error":"internal"}"#.utf8)
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func invalid(_ field: String, _ reason: String) -> APIError {
        APIError(.badRequest, .invalidField, field: field, reason: reason)
    }

    static func unauthenticated(_ reason: String) -> APIError {
        APIError(.unauthorized, .unauthenticated, reason: reason)
    }

    static let notFound = APIError(.notFound, .notFound, reason: "no such activity or token for this user")
}
