import AsyncHTTPClient
import Foundation
import HTTPTypes
import IsletMessages
import IsletRuntime
import Logging
import NIOCore
import NIOHTTP1

/// content-service's backend API at `host:port` (`ISLET_CONTENT_HTTP`), called with a backend key
/// that reads (`ISLET_CONTENT_HTTP_KEY`). Any instance answers: one that does not own the activity
/// asks the owner (content-service's `ISLET_CONTENT_PEERS`); a 421 or a 503 from there, or no
/// answer within ``timeout``, is a 503 the app retries.
public struct ContentServiceClient: ActivityContentSource {
    let baseURL: String
    let key: String
    /// A call not answered within this (connecting included) is a 503.
    let timeout: Duration
    let logger: Logger

    public init(host: String, port: Int, key: String, timeout: Duration = .seconds(5), logger: Logger) {
        self.baseURL = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        self.key = key
        self.timeout = timeout
        self.logger = logger
    }

    /// The largest answer taken (content fits 4 KB; the JSON around it is small).
    static let maximumAnswerBytes = 64 * 1_024

    public func content(activityId: String, bundleId: String) async throws(APIError) -> [UInt8] {
        // Both are checked identifiers (letters, digits, `. _ ~ -`): nothing to escape.
        var request = HTTPClientRequest(url: "\(baseURL)/v1/activities/\(activityId)/content?bundleId=\(bundleId)")
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        let status: HTTPResponseStatus
        let body: [UInt8]
        do {
            let response = try await HTTPClient.shared.execute(request, timeout: .milliseconds(Int64(timeout / .milliseconds(1))))
            status = response.status
            body = Array(buffer: try await response.body.collect(upTo: Self.maximumAnswerBytes))
        } catch {
            logger.warning("content-service did not answer a content lookup", metadata: ["error": "\(error)"])
            throw Self.unavailable("content-service did not answer")
        }
        // content-service's own refusal, when it gave one (its reason says which 404 it is).
        let refusal = try? IsletJSON.decodeValue(HTTPAPIError.Body.self, from: body)
        switch (status.code, refusal?.field) {
        case (200, _):
            return body
        case (404, "activityId"?):
            throw APIError(.notFound, .notFound, field: "activityId", reason: refusal?.reason ?? "no content of this activity yet")
        case (409, _):
            throw APIError(.conflict, .conflict, field: "activityId", reason: refusal?.reason ?? "the activity cannot be started by the app")
        case (410, _):
            throw APIError(.gone, .ended, field: "activityId", reason: "the activity has ended: do not start it")
        case (401, _), (403, _):
            logger.error(
                "content-service refused token-registry's key: apps cannot read activity content (check ISLET_CONTENT_HTTP_KEY against content-service's ISLET_GRPC_KEYS, read)",
                metadata: ["http.status": "\(status.code)"])
            throw APIError(.internalServerError, .internal, reason: "internal error")
        case (421, _):
            logger.warning(
                "the content-service instance at ISLET_CONTENT_HTTP does not own the activity and has no peers to ask (ISLET_CONTENT_PEERS)",
                metadata: ["activity.id": "\(activityId)"])
            throw Self.unavailable("content-service answered 421")
        default:
            // A 404 without the field: a content-service without the route (older, mid-upgrade).
            logger.warning(
                "content-service did not answer a content lookup", metadata: ["http.status": "\(status.code)", "reason": "\(refusal?.reason ?? "")"])
            throw Self.unavailable("content-service answered \(status.code)")
        }
    }

    private static func unavailable(_ why: String) -> APIError {
        APIError(.serviceUnavailable, .unavailable, reason: "the activity's content cannot be read now (\(why)): retry in a moment", retryAfterSeconds: 2)
    }
}
