import IsletRuntime

/// Where an activity's content comes from: content-service's backend API
/// (`GET /v1/activities/{activityId}/content`, ``ContentServiceClient``).
public protocol ActivityContentSource: Sendable {
    /// The JSON body content-service answered with, or the refusal to give the app (404 nothing
    /// announced, 410 ended, 503 try again).
    func content(activityId: String, bundleId: String) async throws(APIError) -> [UInt8]
}
