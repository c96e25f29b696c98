import Foundation
import IsletMessages

/// A push request waiting to be sent (or being sent), with what the dispatcher knows of its attempts.
public struct QueuedRequest: Sendable {
    public var request: PushRequest
    /// Identifies the input record (to mark it processed once the outcome is persisted).
    public var ticket: UInt64
    public var attempts = 0
    public var enqueuedAt: Date
    public var firstAttemptAt: Date?
    /// A previous attempt may have reached the phone (timeout, lost connection): a resend must not
    /// alert again.
    public var ambiguous = false
    /// The provider token was renewed for this request once already (403 ExpiredProviderToken).
    public var renewedProviderToken = false
    /// A record saying an attempt may have reached the phone (``PushResult/sending``) is on the
    /// topic for it: the partition's next owner sends it without its alert.
    public var handedOff = false
    /// The partition it was read from (the budget it spends is written there).
    public var partition: Int32?
    /// The assignment of that partition it was read under (``DispatchMachine/own(_:)``).
    var assignment: UInt64?
    /// The id of its last announcement (`sending`) not taken back: a `retrying` names it.
    var announcementId: String?

    public init(request: PushRequest, ticket: UInt64, enqueuedAt: Date, partition: Int32? = nil) {
        self.request = request
        self.ticket = ticket
        self.enqueuedAt = enqueuedAt
        self.partition = partition
    }
}
