import IsletMessages

/// Ends an activity's token in token-registry (its gRPC `InvalidateActivity`): what the freshness
/// monitor does after it ended an activity by itself (severely stale, or at the end of its
/// lifetime), so that the token stops being offered to every service as live.
public protocol ActivityInvalidating: Sendable {
    /// Throws when token-registry could not be told (it is tried again); an activity it does not
    /// know is not an error.
    func invalidate(activityId: String, bundleId: String, reason: InvalidationReason) async throws
}
