import HTTPTypes
import IsletRuntime

/// Why a request was refused: Islet's one HTTP API error (``HTTPAPIError``), as token-registry
/// uses it.
///
/// ```json
/// {"error": "invalidField", "field": "token", "reason": "must be even-length hex (got 63 characters)"}
/// ```
public typealias APIError = HTTPAPIError

extension HTTPAPIError {
    static func invalid(_ field: String, _ reason: String) -> APIError {
        APIError(.badRequest, .invalidField, field: field, reason: reason)
    }

    static func unauthenticated(_ reason: String) -> APIError {
        APIError(.unauthorized, .unauthenticated, reason: reason)
    }

    static let notFound = APIError(.notFound, .notFound, reason: "no such activity or token for this user")
}
