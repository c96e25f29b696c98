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

/// One activity's requests that are not sent yet, and the coalescing rules.
///
/// While requests wait (for budget, backoff, or the one in flight), a newer update replaces older
/// pending updates — the newest content wins — but `start` and `end` are never dropped, and an
/// `end` cancels the updates still pending. Every replaced request gets an outcome (`coalesced`,
/// naming its replacement).
public struct ActivityQueue: Sendable {
    public private(set) var pending: [QueuedRequest] = []

    public init() {}

    public var isEmpty: Bool { pending.isEmpty }
    public var first: QueuedRequest? { pending.first }

    /// A request replaced by another, and the request id that replaced it.
    public struct Replaced: Sendable {
        public var request: QueuedRequest
        public var by: String
    }

    /// Adds a request; returns the requests it made pointless (possibly itself, when a pending
    /// update already carries newer content).
    public mutating func enqueue(_ new: QueuedRequest) -> [Replaced] {
        let request = new.request
        if request.event == .update && request.supersedable {
            // Content newer than this one is already waiting: this one is stale.
            if let newer = pending.last(where: { Self.isSupersedableUpdate($0.request) && $0.request.contentSequence > request.contentSequence }) {
                return [Replaced(request: new, by: newer.request.requestId)]
            }
            let replaced = removeSupersedableUpdates(by: request.requestId)
            pending.append(new)
            return replaced
        }
        if request.event == .end {
            let replaced = removeSupersedableUpdates(by: request.requestId)
            pending.append(new)
            return replaced
        }
        pending.append(new)
        return []
    }

    /// Takes the first request (to send it).
    public mutating func removeFirst() -> QueuedRequest {
        pending.removeFirst()
    }

    /// Puts a request back in front (its attempt failed and it will be retried); it may be replaced
    /// by a newer update from then on, like any pending one.
    public mutating func returnToFront(_ request: QueuedRequest) {
        pending.insert(request, at: 0)
    }

    /// Removes every pending request (the activity is gone from this instance); returns them.
    public mutating func removeAll(where shouldRemove: (QueuedRequest) -> Bool) -> [QueuedRequest] {
        let removed = pending.filter(shouldRemove)
        pending.removeAll(where: shouldRemove)
        return removed
    }

    private mutating func removeSupersedableUpdates(by requestId: String) -> [Replaced] {
        let replaced = pending.filter { Self.isSupersedableUpdate($0.request) }.map { Replaced(request: $0, by: requestId) }
        pending.removeAll { Self.isSupersedableUpdate($0.request) }
        return replaced
    }

    static func isSupersedableUpdate(_ request: PushRequest) -> Bool {
        request.event == .update && request.supersedable
    }
}
