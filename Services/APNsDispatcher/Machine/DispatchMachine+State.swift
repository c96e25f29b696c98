import DequeModule
import Foundation
import HeapModule
import IsletMessages
import IsletTokens
import Logging
import NIOCore

/// What the machine keeps per activity, lane, token and partition.
extension DispatchMachine {
    /// One send of a request: what goes to APNs, and what its answer is handled with.
    struct Attempt: Sendable {
        var entry: QueuedRequest
        var key: String
        var team: String
        var push: APNsPush
        var environment: APNsEnvironment
        /// The token's fingerprint (`nil` for a broadcast).
        var fingerprint: String?
        /// The registration time of the token record it was sent with (`nil` for a broadcast).
        var registeredAt: Date?
        /// The channel of a broadcast.
        var channelId: String?
        var priority: Int
        var downgraded: Bool
        /// The `sending` record of a push-to-start (each attempt) or of a push with an alert (its
        /// first), persisted before the send: after a crash, the next owner knows it may have been
        /// delivered. Its ``PushOutcome/announcementId`` is the one a `retrying` takes back.
        var announcement: PushOutcome?
    }

    struct Slot {
        var queue = ActivityQueue()
        var inFlight: QueuedRequest?
        /// Nothing is sent before this (a retry's backoff, or 429 TooManyRequests for the token).
        var notBefore: Date?
        /// A wake-up is scheduled for then.
        var wakeAt: Date?
        /// An `end` was delivered: later updates are pointless.
        var ended = false
        var endedAt: Date?
        /// Failed tries to make the activity's broadcast channel, in a row.
        var channelAttempts: Int?

        /// The request to look at next: the first waiting, when none is in flight.
        var next: QueuedRequest? { inFlight == nil ? queue.first : nil }

        /// Whether the request is in flight or waiting here.
        func holds(_ requestId: String) -> Bool {
            inFlight?.request.requestId == requestId || queue.pending.contains { $0.request.requestId == requestId }
        }
    }

    /// A team whose credentials APNs refused (a 403 other than ExpiredProviderToken). Its pushes
    /// are held in their queues, not sent and not given up, until `until`; then one request probes
    /// the lane while the others wait for its answer. An answer that shows the credentials were
    /// accepted reopens the lane; another refusal starts the cooldown again; an answer that says
    /// nothing about them (5xx, a provider-token problem, no answer) lets another request probe.
    /// A held request keeps its bounds: its `expiration`, and the retry policy's deadline.
    struct StoppedLane {
        var until: Date
        /// APNs's reason for the last refusal.
        var reason: String
        /// The request id of the probe in flight.
        var probe: String?
        /// The activities whose next request is held: pumped again when the probe is answered.
        var held: Set<String> = []
    }

    /// A token APNs declared dead (``TokenVerdict``, the rule token-registry and content-service
    /// apply too): a record of it registered at or before APNs's verdict is not used; one
    /// registered after it (the app registered the token again) is alive.
    struct DeadToken {
        var verdict: TokenVerdict
        var at: Date

        func kills(_ record: DeliveryToken) -> Bool {
            verdict.kills(fingerprint: record.fingerprint, registeredAt: record.registeredAt)
        }
    }

    /// The newest content of an activity handed to APNs (sent, perhaps delivered): an update with
    /// older content is not sent after it (it could reach the phone after the newer one), and
    /// newer content is not sent with an older `aps.timestamp` than any handed out (iOS would
    /// ignore it).
    struct Floor {
        var sequence: Int64
        var requestId: String
        var at: Date
        /// The newest `aps.timestamp` handed to APNs for the activity, whatever its content.
        var timestamp: Int64
    }

    /// A request whose retry waits for its note (``Action/note(_:)``) to be persisted.
    struct Parked {
        var key: String
        var at: Date
    }

    /// A copy of a request read while the request was held here, and the assignment of its
    /// partition it was read under.
    struct Copy {
        var ticket: UInt64
        var assignment: UInt64?
    }

    /// An activity to look at again at a time.
    struct Wakeup: Comparable {
        var at: Date
        var key: String
        static func < (lhs: Wakeup, rhs: Wakeup) -> Bool { lhs.at < rhs.at }
    }
}
