import Foundation
import Hummingbird
import IsletKafka
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTokens

/// The questions a backend may ask about an activity: its state, and the dispatcher's latest
/// answers to its pushes. Answered by the instance that owns the activity's partition (it has the
/// activity's memory); another instance asks the owner (``PeerForwarding``, `ISLET_CONTENT_PEERS`),
/// or without peers answers 421 `notOwner`.
extension ActivityHTTPAPI {
    /// `GET /v1/activities/{activityId}`: what content-service knows of the activity.
    struct ActivityState: Codable, Equatable {
        var activityId: String
        var bundleId: String
        /// The partition of the activity topics it lives in.
        var partition: Int32
        /// `none` (no update token registered), `active`, `superseded`, `invalidated` (the
        /// registry's states), or `rejected`: APNs answered that the token is no longer valid, and
        /// nothing more is sent until the app registers one again.
        var token: String
        var tokenRegisteredAt: Date?
        var tokenRejectedAt: Date?
        var attributesType: String?
        /// The highest event sequence applied (a later event must be above it).
        var lastSequence: Int64?
        /// The state of the last content sent.
        var state: String?
        var startedAt: Date?
        var ended: Bool
        /// Content is being kept on the phone: started, not ended, its token not rejected.
        var live: Bool
        /// `fresh`, `staleRecoverable` (sent again) or `severelyStale` (to be ended); absent when not live.
        var freshness: String?
        var stale: Bool
        var staleSince: Date?
        /// Times the latest content was sent again because it went stale.
        var resends: Int
        var latestRequest: LatestRequestState?
        /// Events scheduled for later (``ActivityEvent/at``), the earliest first; absent when none.
        var scheduled: [ScheduledStep]?
        /// For an activity started by a push-to-start APNs accepted, until its update token comes:
        /// `waiting` (within the confirmation time, `ISLET_START_CONFIRMATION_SECONDS`) or
        /// `unconfirmed` (it did not come in time: the push-to-start token may be stale, and is
        /// not used again until the app registers it again). Absent otherwise.
        var startConfirmation: String?
        /// An activity sent by broadcast: its channel, once content-service has read the outcome
        /// of a broadcast on it. A push-to-start of the activity to a phone starts it there
        /// (`input-push-channel`); until then such a start is answered 409. Absent otherwise.
        var channelId: String?
    }

    /// An event kept for its time.
    struct ScheduledStep: Codable, Equatable {
        var at: Date
        var sequence: Int64
        var eventId: String
        var kind: String
        /// The state it shows (its template's state field, when the event sets it).
        var state: String?
    }

    struct LatestRequestState: Codable, Equatable {
        /// Its `apns-id`.
        var requestId: String
        var event: String
        var createdAt: Date
        var staleDate: Date?
        /// The sequence of the event whose content it carries.
        var contentSequence: Int64
        /// It carried an event's content (not a re-send or an end content-service made by itself).
        var content: Bool
        var pushToStart: Bool
        /// The dispatcher's final answer (`delivered`, `coalesced`, `tokenInvalid`, …); absent until it answers.
        var outcome: String?
    }

    /// `GET /v1/activities/{activityId}/outcomes`.
    struct OutcomeList: Codable, Equatable {
        var activityId: String
        var bundleId: String
        /// The latest first.
        var outcomes: [OutcomeItem]
    }

    struct OutcomeItem: Codable, Equatable {
        var requestId: String
        var result: String
        var completedAt: Date
        var attempts: Int
        /// The priority the push went with (10 or 5; 5 when downgraded).
        var priority: Int?
        var apnsStatus: Int?
        var apnsReason: String?
        var apnsId: String?
        /// `apns-unique-id`: the delivery's key in Apple's Push Notifications Console, when APNs sent one.
        var apnsUniqueId: String?
        var latencyMilliseconds: Double?
        /// The newer request that replaced it (`coalesced`).
        var supersededBy: String?
        var detail: String?
        /// A broadcast's channel: the id an app starts its activity on (`input-push-channel`).
        var channelId: String?

        init(_ outcome: PushOutcome) {
            requestId = outcome.requestId
            result = outcome.result.rawValue
            completedAt = outcome.completedAt
            attempts = outcome.attempts
            priority = outcome.priorityUsed
            apnsStatus = outcome.apns?.status
            apnsReason = outcome.apns?.reason
            apnsId = outcome.apns?.apnsId
            apnsUniqueId = outcome.apns?.uniqueId
            latencyMilliseconds = outcome.latencyMilliseconds
            supersededBy = outcome.supersededBy
            detail = outcome.detail
            channelId = outcome.channelId
        }
    }

    /// Outcomes listed at most (the memory keeps the positions of the latest ``OutcomePositions/capacity``).
    static let maximumOutcomeLimit = 100

    func getActivity(_ request: Request, activityId: String) async throws(HTTPAPIError) -> Response {
        let (bundleId, partition, view): (String, Int32, ContentEngine.ActivityView)
        switch try await asked(request, activityId: activityId) {
        case .elsewhere(let answer): return answer
        case .here(let b, let p, let v): (bundleId, partition, view) = (b, p, v)
        }
        let memory = view.memory
        let latest = memory?.latest
        let token: String
        if let memory, memory.gone, !ContentEngine.registeredAgain(memory, token: view.token) {
            token = "rejected"
        } else {
            token = view.token?.state.rawValue ?? "none"
        }
        let state = ActivityState(
            activityId: activityId, bundleId: bundleId, partition: partition, token: token, tokenRegisteredAt: view.token?.registeredAt,
            tokenRejectedAt: token == "rejected" ? memory?.goneAt : nil, attributesType: latest?.attributesType, lastSequence: memory?.lastSequence,
            state: memory?.lastState, startedAt: memory?.startedAt, ended: memory?.ended ?? false, live: memory?.isLive ?? false,
            freshness: view.freshness?.rawValue, stale: view.staleSince != nil, staleSince: view.staleSince, resends: memory?.resends ?? 0,
            latestRequest: latest.map {
                LatestRequestState(
                    requestId: $0.requestId, event: $0.event.rawValue, createdAt: $0.createdAt, staleDate: $0.staleDate, contentSequence: $0.contentSequence,
                    content: $0.isContent, pushToStart: $0.isPushToStart, outcome: memory?.outcome(of: $0.requestId)?.rawValue)
            },
            scheduled: memory.flatMap { memory in
                memory.steps.isEmpty
                    ? nil
                    : memory.steps.map { step in
                        ScheduledStep(
                            at: step.at ?? .distantPast, sequence: step.sequence, eventId: step.eventId, kind: step.kind.rawValue,
                            state: intake.engine.assembler.templates[step.attributesType].flatMap { template in
                                if case .string(let state)? = step.fields[template.stateField] { state } else { nil }
                            })
                    }
            },
            startConfirmation: view.token != nil ? nil : memory?.startWatch.map { $0.reportedAt == nil ? "waiting" : "unconfirmed" },
            channelId: memory?.channelId)
        return try Self.json(state)
    }

    func getOutcomes(_ request: Request, activityId: String) async throws(HTTPAPIError) -> Response {
        var limit = OutcomePositions.capacity
        if let given = request.uri.queryParameters["limit"] {
            guard let number = Int(String(given)), (1...Self.maximumOutcomeLimit).contains(number) else {
                throw Self.invalid("limit", "must be a whole number from 1 to \(Self.maximumOutcomeLimit)")
            }
            limit = number
        }
        let (bundleId, view): (String, ContentEngine.ActivityView)
        switch try await asked(request, activityId: activityId) {
        case .elsewhere(let answer): return answer
        case .here(let b, _, let v): (bundleId, view) = (b, v)
        }
        let positions = view.memory?.outcomePositions ?? []
        let read: [KafkaPosition: PushOutcome]
        do {
            read = try await lookup.readOutcomes(positions)
        } catch {
            throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: error.reason)
        }
        // Outcomes are kept by activity: those of another app's activity of the same id are not listed.
        let outcomes = read.values.filter { $0.bundleId == nil || $0.bundleId == bundleId }
            .sorted { ($0.completedAt, $0.requestId) > ($1.completedAt, $1.requestId) }
        return try Self.json(OutcomeList(activityId: activityId, bundleId: bundleId, outcomes: outcomes.prefix(limit).map(OutcomeItem.init)))
    }

    /// Where a question about an activity is answered.
    enum Asked {
        /// Here: this instance owns the activity's partition and knows the activity.
        case here(bundleId: String, partition: Int32, view: ContentEngine.ActivityView)
        /// The answer of the instance that owns it (``PeerForwarding``).
        case elsewhere(Response)
    }

    /// Checks a question about an activity: the caller may read, the ids are valid, this instance
    /// owns the activity's partition and is ready, and the activity is known. When another instance
    /// owns it (or this one holds no partition now) and peers are configured, the question goes to
    /// the owner and its answer is the answer.
    func asked(_ request: Request, activityId: String) async throws(HTTPAPIError) -> Asked {
        _ = try authorize(request, needs: .read)
        try Self.requireActivityId(activityId)
        guard let bundleId = request.uri.queryParameters["bundleId"].map(String.init), !bundleId.isEmpty else {
            throw Self.invalid("bundleId", "required as a query parameter (?bundleId=com.example.app): activity ids are scoped per app")
        }
        do {
            try MessageKey.requireBundleId(bundleId, field: "bundleId")
        } catch {
            throw Self.invalid(error.field, error.problem)
        }
        guard let partition = lookup.partition(activityId) else {
            throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: "starting: the token table and activity memory are being read", retryAfterSeconds: 5)
        }
        let owned = lookup.owned()
        // Forwarded here and not the owner: 421 whatever else, so that a 503 a forwarder relays
        // only ever comes from the owner.
        if PeerForwarding.isForwarded(request), !owned.contains(partition) { throw Self.notOwner(partition) }
        // Elsewhere, or here but still reading its memory (a restart): the owner's answer, when
        // another instance owns it now.
        if !owned.contains(partition) || !intake.isReady(), let peers, !PeerForwarding.isForwarded(request) {
            switch await peers.forward(request, partition: partition) {
            case .answered(let answer): return .elsewhere(answer)
            case .noOwner where owned.contains(partition): break  // its own, once it has read it (not while reading: see the readiness gate)
            case .noOwner, .unknown:
                throw HTTPAPIError(
                    .serviceUnavailable, .unavailable,
                    reason: "no content-service instance answers for partition \(partition) of the activity topics now (partitions are moving between instances, or a peer does not answer): retry in a moment",
                    retryAfterSeconds: 2)
            }
        }
        guard intake.isReady() else {
            throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: "starting: the token table and activity memory are being read", retryAfterSeconds: 5)
        }
        // Holding nothing, it cannot tell who holds the activity: its consumer is (re)joining the group.
        guard !owned.isEmpty else {
            throw HTTPAPIError(
                .serviceUnavailable, .unavailable,
                reason: "this instance holds no partition now (its consumer is joining the group: at start, in a rebalance, after Kafka stalled): retry in a moment",
                retryAfterSeconds: 2)
        }
        guard owned.contains(partition) else { throw Self.notOwner(partition) }
        guard let view = intake.engine.view(of: MessageKey.activity(bundleId: bundleId, activityId: activityId)) else {
            throw HTTPAPIError(
                .notFound, .notFound, field: "activityId",
                reason: "no activity \(activityId) of \(bundleId) is known: no event or token of it (or forgotten after its retention)")
        }
        return .here(bundleId: bundleId, partition: partition, view: view)
    }

    /// 421 `notOwner`: another instance owns the activity's partition.
    static func notOwner(_ partition: Int32) -> HTTPAPIError {
        HTTPAPIError(
            .misdirectedRequest, .notOwner,
            reason:
                "the activity is in partition \(partition) of the activity topics, which another content-service instance owns: ask that one (or, while partitions move between instances, again in a moment)"
        )
    }

    static func json(_ value: some Encodable) throws(HTTPAPIError) -> Response {
        guard let body = try? IsletJSON.encode(value) else { throw HTTPAPIError(.internalServerError, .internal, reason: "internal error") }
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}
