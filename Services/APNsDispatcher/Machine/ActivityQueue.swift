import Foundation
import IsletMessages

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
        if request.isWidget {
            // Widget pushes to a device carry their activities' sequences (several activities
            // share the key) and say only "reload": the newest arrival replaces what waits.
            let replaced = removeSupersedableUpdates(by: request.requestId)
            pending.append(new)
            return replaced
        }
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
