import Foundation
import Hummingbird
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens

/// `GET /v1/activities/{activityId}/content`: what the phone should show of an activity now, for
/// an app that starts it only with real data (Lyft's pattern: the app asks, and starts the Live
/// Activity only when content comes back). Apps never call content-service: token-registry asks
/// here for an app that proved the activity is its user's (`GET /v1/activities/{id}/content` of
/// token-registry, with the user's JWT and the activity's ticket), with a backend key that reads.
///
/// The answer is the content of the latest request made for the activity, as the phone would
/// decode it (`aps.content-state`): made for the app version and language of the activity's
/// token, or, before the app registered one (the usual case here), for the newest app version in
/// the template's default language. Not for an activity started by push-to-start (409: the phone
/// has it already), nor one that ended or whose token was ended (410).
extension ActivityHTTPAPI {
    struct ActivityContent: Codable, Equatable {
        var activityId: String
        var bundleId: String
        var attributesType: String
        /// The sequence of the event whose content it is: the app's later updates are above it.
        var sequence: Int64
        /// The template state the content shows (`out_for_delivery`).
        var state: String?
        /// `aps.content-state`: the activity's `ContentState`, as ActivityKit decodes it.
        var contentState: JSONValue
        /// `aps.attributes`, when the content was made for a push-to-start (the app started it
        /// itself otherwise, with attributes of its own).
        var attributes: JSONValue?
        /// `aps.stale-date`: when the content goes out of date.
        var staleDate: Date?
        /// `aps.relevance-score`, when the content has one.
        var relevanceScore: Double?
        /// The push request the content was made for (its `apns-id`).
        var requestId: String
        /// When it was made.
        var createdAt: Date
    }

    func getContent(_ request: Request, activityId: String) async throws(HTTPAPIError) -> Response {
        let (bundleId, view): (String, ContentEngine.ActivityView)
        switch try await asked(request, activityId: activityId) {
        case .elsewhere(let answer): return answer
        case .here(let b, _, let v): (bundleId, view) = (b, v)
        }
        guard let memory = view.memory, let latest = memory.latest, memory.lastSequence != nil else {
            throw HTTPAPIError(
                .notFound, .notFound, field: "activityId", reason: "no content of activity \(activityId) of \(bundleId) yet: its backend has sent no event of it")
        }
        // Ended, or its token ended by the app or a backend (no end event yet): its token could
        // not be registered again (409), so a card started now would never update.
        guard !memory.ended, view.token?.state != .invalidated || memory.gone else {
            throw HTTPAPIError(.gone, .ended, field: "activityId", reason: "activity \(activityId) of \(bundleId) has ended: it must not be started")
        }
        // Started by push-to-start: the phone has it (or will) already; a start by the app would be a second one.
        guard !(latest.isPushToStart || memory.startedWith != nil) || memory.startNeverArrived else {
            throw HTTPAPIError(
                .conflict, .conflict, field: "activityId",
                reason: "activity \(activityId) of \(bundleId) was started on the phone by push-to-start: starting it in the app too would show it twice")
        }
        let stored = try await latestPayload(memory, latest: latest, activityId: activityId, bundleId: bundleId)
        guard case .object(let body)? = JSONReader.value(of: Array(stored.payload.utf8)), case .object(let aps)? = body["aps"],
            let contentState = aps["content-state"]
        else {
            throw HTTPAPIError(.internalServerError, .internal, reason: "internal error")
        }
        let staleDate: Date? = if case .integer(let seconds)? = aps["stale-date"] { Date(timeIntervalSince1970: TimeInterval(seconds)) } else { nil }
        let relevance: Double? =
            switch aps["relevance-score"] {
            case .integer(let value)?: Double(value)
            case .number(let value)?: value
            default: nil
            }
        let content = ActivityContent(
            activityId: activityId, bundleId: bundleId, attributesType: stored.attributesType, sequence: stored.contentSequence, state: memory.lastState,
            contentState: contentState, attributes: aps["attributes"], staleDate: staleDate, relevanceScore: relevance, requestId: stored.requestId,
            createdAt: stored.createdAt)
        return try Self.json(content)
    }

    /// The latest request in full: from the memory, or read again from where Kafka stored it
    /// (kept until the next request); 404 when it is gone from there, 503 when it cannot be read now.
    private func latestPayload(_ memory: ActivityMemory, latest: LatestRequest, activityId: String, bundleId: String) async throws(HTTPAPIError)
        -> PushRequest
    {
        if let inMemory = memory.latestRequest, inMemory.requestId == latest.requestId {
            return inMemory
        } else if let position = memory.payloadStoredAt, !memory.payloadLost {
            let read: PushRequest?
            do {
                read = try await lookup.readRequest(position, latest.requestId)
            } catch {
                throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: error.reason, retryAfterSeconds: 2)
            }
            let activityKey = MessageKey.activity(bundleId: bundleId, activityId: activityId)
            guard let read else {
                // Not asked for again: the memory knows it is lost until the next request.
                intake.engine.restorePayloads(
                    [:], lost: [ContentEngine.PayloadToRead(activityKey: activityKey, position: position, requestId: latest.requestId)])
                throw Self.contentLost(activityId, bundleId)
            }
            // Kept until the next request: an app asking again (a retry, a second screen) reads no Kafka.
            intake.engine.restorePayloads([activityKey: (position, read)])
            return read
        } else {
            throw Self.contentLost(activityId, bundleId)
        }
    }

    /// 404: the latest payload is no longer where it was stored on Kafka (it expired, or the topic
    /// was recreated); the backend's next event brings content again.
    static func contentLost(_ activityId: String, _ bundleId: String) -> HTTPAPIError {
        HTTPAPIError(
            .notFound, .notFound, field: "activityId",
            reason: "the latest content of activity \(activityId) of \(bundleId) is no longer on Kafka: its backend's next event brings content again")
    }
}
