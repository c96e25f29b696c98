import AsyncHTTPClient
import Foundation
import HTTPTypes
import IsletRuntime
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

    public init(host: String, port: Int, key: String, timeout: Duration = .seconds(5)) {
        self.baseURL = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        self.key = key
        self.timeout = timeout
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
            throw Self.unavailable("content-service did not answer")
        }
        switch status.code {
        case 200: return body
        case 404: throw APIError(.notFound, .notFound, field: "activityId", reason: "no content of this activity yet: its backend has not announced it (or it was forgotten)")
        case 410: throw APIError(.gone, .ended, field: "activityId", reason: "the activity has ended: do not start it")
        default: throw Self.unavailable("content-service answered \(status.code)")
        }
    }

    private static func unavailable(_ why: String) -> APIError {
        APIError(.serviceUnavailable, .unavailable, reason: "the activity's content cannot be read now (\(why)): retry in a moment", retryAfterSeconds: 2)
    }
}
