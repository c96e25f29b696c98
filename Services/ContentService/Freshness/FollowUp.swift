import IsletMessages

/// What the monitor does about one activity.
enum FollowUp: Equatable {
    case resend
    case end(InvalidationReason)
    /// The activity's end again, as it was (its dismissal date kept): it never reached the phone
    /// (no token then), and a token was registered since (``ActivityMemory/endNeverArrived``).
    case endAgain
}
