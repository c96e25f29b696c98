import IsletMessages

/// What the monitor does about one activity.
enum FollowUp: Equatable {
    case resend
    case end(InvalidationReason)
}
