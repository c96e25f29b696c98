/// What a backend may do with the gRPC APIs.
public enum BackendPermission: String, Sendable, Hashable, CaseIterable {
    /// Lookups: an activity's state, a user's activities, the stale activities.
    case read
    /// Changes: publishing events (start, update, end, push-to-start), invalidating an activity.
    case write
}
