import Foundation
// apns-dispatcher's policies, in one place: the send window and queues (DispatcherPolicy), the
// priority-10 budgets (BudgetPolicy) and retries (RetryPolicy).

/// The dispatcher's rules, in one place.
public struct DispatcherPolicy: Sendable {
    public var budgets = BudgetPolicy()
    public var retry = RetryPolicy()
    /// At most this many pushes wait for APNs's answer at once (over all connections): the
    /// ceiling of the send window (``SendWindow``), which grows towards it while APNs answers
    /// quickly and shrinks when it does not.
    public var maximumInFlight = 1_024
    /// The send window's size at start.
    public var initialInFlight = 32
    /// The send window never shrinks below this.
    public var minimumInFlight = 8
    /// An answer slower than this (or none) halves the send window: pushes then wait in their
    /// activities' queues rather than at a slow server, far from the request deadline.
    public var slowAnswer: Duration = .seconds(2)
    /// At most this many requests wait in the activities' queues; reading more input waits.
    public var maximumQueued = 20_000
    /// A request whose key has no token yet waits for one — the app registers it over HTTP while the
    /// backend's event travels Kafka, and a remotely started activity gets its token only once iOS
    /// started it — at most this long, and never past its `apns-expiration`. Newer content for the
    /// activity replaces it meanwhile (coalesced). A request still without a token then ends as
    /// `awaitingToken` (never `tokenInvalid`: nothing says the activity is gone).
    public var tokenWait: Duration = .seconds(120)
    /// A request whose token is invalidated (or was refused by APNs) waits this long for a newer
    /// record before it ends as `tokenInvalid`: the app that registers the same token again after
    /// a reinstall is answered by token-registry as soon as the record is on Kafka, and its
    /// backend's next event may reach this instance before the table has read that record.
    public var tokenRecheck: Duration = .seconds(3)
    /// At most this many activities wait for their token at once (their requests do not count
    /// against ``maximumQueued``: activities without a token must not hold up everyone's input);
    /// past it, the one whose wait ends first ends as `awaitingToken` at once.
    public var maximumAwaitingToken = 50_000
    /// At most this many requests wait for a token at once, over all activities (starts, ends and
    /// pushes with an alert are never coalesced: an activity may hold several, up to 4 KB each); past
    /// it, the activity whose wait ends first gives up (`awaitingToken`).
    public var maximumAwaitingRequests = 20_000
    /// Updates to activities older than this are not sent: iOS stops showing updates after 8 hours.
    public var activityLifetime: Duration = .seconds(8 * 3_600)
    /// After APNs refused a team's credentials (403), its pushes are held this long; then one is
    /// sent to probe whether APNs accepts them again, and the others wait for its answer.
    public var laneCooldown: Duration = .seconds(60)
    /// A broadcast channel is deleted this long after its activity's `end` was delivered (an
    /// ended activity stays on the lock screen up to 4 hours; nothing is sent to it meanwhile).
    public var channelDeletionDelay: Duration = .seconds(4 * 3_600)
    /// How many of the request ids it gave a final outcome to the dispatcher remembers (the most
    /// recent), besides the outcomes it reads when a partition is assigned: a copy of one read again
    /// is released, not sent again.
    public var rememberedFinished = 100_000
    /// Besides, how many of each activity's requests with a final outcome it remembers, each for 10
    /// minutes after its outcome (for ``rememberedFloors`` activities: past that, the activity first
    /// noted is forgotten first): a copy content-service wrote again after a lost acknowledgement is
    /// released, not given a second outcome, however many requests of other activities finished in
    /// between, as long as fewer than this many of its own did and its activity is still kept.
    /// `0`: none (tests that check the outcomes read at an assignment alone).
    public var rememberedFinishedPerActivity = 64
    /// How many activities' newest content sent the dispatcher remembers (the most recent, for at
    /// most an hour each): older content of one of them read later (a request content-service
    /// wrote again after a refusal, once newer content had gone out) is not sent after it. Also how
    /// many activities' finished requests it keeps (``rememberedFinishedPerActivity``).
    public var rememberedFloors = 100_000

    public init() {}
}
