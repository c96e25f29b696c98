import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import IsletLinks
import IsletMessages
import IsletProtos
import IsletRuntime
import Metrics

/// The backends' HTTP/JSON API, on content-service's HTTP port: the same events, with the same
/// rules, as producing to `islet.activity-events.v1` or calling the gRPC API (``EventIntake``).
/// Described in docs/openapi.yaml (checked against these routes by the tests).
///
/// | route | does |
/// | --- | --- |
/// | `POST /v1/activities/{activityId}/events` | start, update or end the activity (202 with the event id and push request ids) |
/// | `GET /v1/activities/{activityId}?bundleId=` | the activity's state: its token, last sequence and state, freshness, latest request and its outcome |
/// | `GET /v1/activities/{activityId}/outcomes?bundleId=&limit=` | the dispatcher's latest answers to its pushes (at most 4 kept) |
/// | `GET /v1/activities/{activityId}/content?bundleId=` | the content the phone should show now (token-registry asks it for an app about to start the activity) |
///
/// Every call needs `Authorization: Bearer <key>` of a backend of `ISLET_GRPC_KEYS` (`write` to
/// publish, `read` to ask);
/// every refusal is a JSON ``HTTPAPIError``: a 4xx publishes nothing; a 503 (`Retry-After`) for
/// Kafka may have, since an unacknowledged record can still be stored, so it is retried with the
/// same key or event id.
/// A call with an `Idempotency-Key` header is answered once: a repeat with the same key and body
/// gets the first answer (``IdempotentReplies``), and the event id derives from the key. With
/// peers (``PeerForwarding``) such a call goes to the instance that owns the activity, which keeps
/// the answers, so a repeat that reaches another instance gets the same answer.
public struct ActivityHTTPAPI: Sendable {
    let intake: EventIntake
    let keys: BackendKeys
    let maxBodyBytes: Int
    let lookup: ActivityLookup
    /// The other instances, asked what this one does not own (nil: it answers 421 `notOwner`).
    let peers: PeerForwarding?
    let replies = IdempotentReplies()
    let metrics: ContentMetrics

    public init(
        intake: EventIntake, keys: BackendKeys, maxBodyBytes: Int = 65_536, lookup: ActivityLookup = .everything(), peers: PeerForwarding? = nil,
        metrics: ContentMetrics = ContentMetrics()
    ) {
        self.metrics = metrics
        self.intake = intake
        self.keys = keys
        self.maxBodyBytes = maxBodyBytes
        self.lookup = lookup
        self.peers = peers
    }

    /// The routes, for the tests that check docs/openapi.yaml against them: (method, path with `{parameters}`).
    public static let routes: [(method: HTTPRequest.Method, path: String)] = [
        (.post, "/v1/activities/{activityId}/events"), (.get, "/v1/activities/{activityId}"), (.get, "/v1/activities/{activityId}/outcomes"),
        (.get, "/v1/activities/{activityId}/content"),
    ]

    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        func counted(_ handle: @escaping @Sendable (Request, String) async throws -> Response) -> @Sendable (Request, Context) async throws -> Response {
            { request, context in
                do {
                    // As the URL spells it, percent-encoded: `order%2D42` is `order-42`.
                    let raw = context.parameters.get("activityId") ?? ""
                    guard let activityId = raw.removingPercentEncoding else { throw Self.invalid("activityId", "is not valid percent-encoded UTF-8") }
                    return try await handle(request, activityId)
                } catch let error as HTTPAPIError {
                    metrics.httpRefused(error.code)
                    throw error
                }
            }
        }
        router.post("v1/activities/:activityId/events", use: counted { [self] in try await postEvent($0, activityId: $1) })
        router.get("v1/activities/:activityId", use: counted { [self] in try await getActivity($0, activityId: $1) })
        router.get("v1/activities/:activityId/outcomes", use: counted { [self] in try await getOutcomes($0, activityId: $1) })
        router.get("v1/activities/:activityId/content", use: counted { [self] in try await getContent($0, activityId: $1) })
    }

    /// The answer: the event as published, and the push requests it becomes.
    struct EventReply: Codable, Equatable {
        var activityId: String
        var bundleId: String
        var eventId: String
        var requestIds: [String]
    }

    static let idempotencyKeyHeader = HTTPField.Name("Idempotency-Key")!
    static let replayedHeader = HTTPField.Name("Idempotent-Replayed")!

    func postEvent(_ request: Request, activityId: String) async throws(HTTPAPIError) -> Response {
        let backend = try authorize(request, needs: .write)
        let idempotencyKey = try Self.idempotencyKey(request.headers)
        let bytes = try await HTTPJSON.body(of: request, maxBodyBytes: maxBodyBytes)
        if idempotencyKey != nil, let answer = try await ownersAnswer(request, activityId: activityId, body: bytes) { return answer }
        // With a key: the request's fingerprint (path and body), what a repeat must match.
        let scopedKey = idempotencyKey.map { "\(backend)\u{0}\($0)" }
        var fingerprint: [UInt8] = []
        var claim: UInt64 = 0
        if let scopedKey {
            var hash = SHA256()
            hash.update(data: Array("POST \(request.uri.path)\u{0}".utf8))
            hash.update(data: bytes)
            fingerprint = Array(hash.finalize())
            switch try claimKey(scopedKey, fingerprint: fingerprint) {
            case .first(let generation): claim = generation
            case .answered(let answer): return answer
            }
        }
        // Only an event published is an answer kept: a refusal may depend on the moment (Kafka,
        // the start, a token not registered yet), and a retry with the key is judged again.
        let reply: EventReply
        do throws(HTTPAPIError) {
            // A true repeat has the same event id; a key reused with another body gets another one
            // (were it the same, the dispatcher would drop its pushes as repeats).
            let derived = idempotencyKey.map { key in
                RequestIds.event(
                    backend: backend, activityId: activityId, idempotencyKey: key, fingerprint: DeepLinkCodec.hex(fingerprint))
            }
            reply = try await publish(bytes, activityId: activityId, backend: backend, derivedEventId: derived)
        } catch {
            if let scopedKey { replies.finish(scopedKey, claim: claim, with: nil) }
            throw error
        }
        guard let body = try? IsletJSON.encode(reply) else {
            if let scopedKey { replies.finish(scopedKey, claim: claim, with: nil) }
            throw HTTPAPIError(.internalServerError, .internal, reason: "internal error")
        }
        if let scopedKey { replies.finish(scopedKey, claim: claim, with: .init(status: 202, body: body)) }
        return Response(status: .accepted, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// A keyed event of an activity whose partition another instance owns: that owner's answer,
    /// as it answered the first call (it keeps the answers). `nil`: handled here — this instance
    /// owns it, or every peer says it does not own the partition either (partitions moving: the
    /// event id derives from the key, so the owner-to-be drops a repeat). A peer that did not
    /// answer may have published it: 503, retry with the key.
    private func ownersAnswer(_ request: Request, activityId: String, body: [UInt8]) async throws(HTTPAPIError) -> Response? {
        guard let partition = lookup.partition(activityId), !lookup.owned().contains(partition) else { return nil }
        // Forwarded here by a peer and not the owner: 421, with or without peers of its own.
        if PeerForwarding.isForwarded(request) { throw Self.notOwner(partition) }
        guard let peers else { return nil }
        // A bad id or a malformed body is refused here, not by every peer.
        try Self.requireActivityId(activityId)
        _ = try HTTPJSON.decodeBody(ActivityEventBody.self, from: body)
        switch await peers.forward(request, partition: partition, body: body) {
        case .answered(let answer): return answer
        case .noOwner: return nil
        case .unknown:
            throw HTTPAPIError(
                .serviceUnavailable, .unavailable,
                reason: "the instance that owns the activity did not answer in time, and may have published the event: retry with the same Idempotency-Key",
                retryAfterSeconds: 2)
        }
    }

    enum Claim {
        /// The first call with the key: handle it, then finish the claim of this generation.
        case first(UInt64)
        /// A repeat of a call answered: its answer again.
        case answered(Response)
    }

    /// Claims an idempotency key for a call with this fingerprint; throws when a call with the key
    /// is under way (409) or the key was used for another request (422).
    private func claimKey(_ scopedKey: String, fingerprint: [UInt8]) throws(HTTPAPIError) -> Claim {
        switch replies.claim(scopedKey, fingerprint: fingerprint, now: intake.engine.clock.date) {
        case .first(let generation): return .first(generation)
        case .answered(let answer):
            return .answered(
                Response(
                    status: .init(code: answer.status),
                    headers: [.contentType: "application/json", Self.replayedHeader: "true"],
                    body: .init(byteBuffer: ByteBuffer(bytes: answer.body))))
        case .inProgress:
            throw HTTPAPIError(.conflict, .conflict, field: "Idempotency-Key", reason: "a request with this key is still being handled: retry in a moment")
        case .reused:
            throw HTTPAPIError(
                .unprocessableContent, .idempotencyKeyReused, field: "Idempotency-Key",
                reason: "this key was used for a different request (another path or body): use a new key for a new request")
        }
    }

    private func publish(_ bytes: [UInt8], activityId: String, backend: String, derivedEventId: String?) async throws(HTTPAPIError) -> EventReply {
        try Self.requireActivityId(activityId)
        let body = try HTTPJSON.decodeBody(ActivityEventBody.self, from: bytes)
        if let given = body.activityId, given != activityId { throw Self.invalid("activityId", "must be the path's when given") }
        let eventId = body.eventId ?? derivedEventId ?? UUID().uuidString.lowercased()
        guard !eventId.isEmpty, eventId.utf8.count <= 128 else { throw Self.invalid("eventId", "must be 1-128 bytes") }
        guard (1...128).contains(body.attributesType.utf8.count) else { throw Self.invalid("attributesType", "must be 1-128 bytes") }
        if body.attributes != nil, body.kind != .start { throw Self.invalid("attributes", "only allowed with kind start") }
        if let target = body.startTarget {
            // As the gRPC API checks them: the device id is part of the push-to-start token's key.
            // Or every device of a user (ActivityEvent.validate: exactly one of the two).
            if let deviceId = target.deviceId, !(1...128).contains(deviceId.utf8.count) || deviceId.contains(":") {
                throw Self.invalid("startTarget.deviceId", "must be 1-128 bytes, without ':'")
            }
            guard APNsEnvironment.knownValues.contains(target.app.environment) else {
                throw Self.invalid("startTarget.app.environment", "must be production or sandbox")
            }
        }
        let event = ActivityEvent(
            eventId: eventId, activityId: activityId, kind: body.kind, attributesType: body.attributesType, fields: body.fields ?? [:],
            urgency: body.urgency ?? .routine, occurredAt: body.occurredAt ?? intake.engine.clock.date, sequence: body.sequence,
            startTarget: body.startTarget, attributes: body.attributes, source: body.source ?? backend, bundleId: body.bundleId,
            presentation: body.presentation, at: body.at)
        do {
            try event.validate()
        } catch {
            throw Self.invalid(error.field, error.problem)
        }
        do {
            let requestIds = try await intake.accept(event)
            return EventReply(activityId: activityId, bundleId: body.bundleId, eventId: eventId, requestIds: requestIds)
        } catch {
            switch error {
            case .starting:
                throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: "starting: the token table and activity memory are being read", retryAfterSeconds: 5)
            case .invalid(let field, let problem): throw Self.invalid(field, problem)
            case .notYet(let field, let problem): throw HTTPAPIError(.conflict, .conflict, field: field, reason: problem, retryAfterSeconds: 1)
            case .notAcknowledged:
                throw HTTPAPIError(.serviceUnavailable, .unavailable, reason: "Kafka did not acknowledge the event: retry the call (same Idempotency-Key or eventId)")
            }
        }
    }

    static let sendKey = "one 'Authorization: Bearer <key>' header"

    /// The path's activity id: 1-128 bytes, without the keys' separators.
    static func requireActivityId(_ activityId: String) throws(HTTPAPIError) {
        guard (1...128).contains(activityId.utf8.count) else { throw invalid("activityId", "must be 1-128 bytes") }
        do {
            try MessageKey.requireActivityId(activityId)
        } catch {
            throw invalid(error.field, error.problem)
        }
    }

    /// 400 `invalidField`: `field` (of the body, the path or the query) breaks a rule.
    static func invalid(_ field: String, _ reason: String) -> HTTPAPIError { HTTPAPIError(.badRequest, .invalidField, field: field, reason: reason) }

    /// The calling backend's name; 401 without a configured key, 403 without the permission.
    func authorize(_ request: Request, needs permission: BackendPermission) throws(HTTPAPIError) -> String {
        let authorization = keys.authorize(request.headers[values: .authorization], needs: permission)
        switch authorization {
        case .allowed(let backend): return backend
        case .missing, .unknownKey:
            throw HTTPAPIError(.unauthorized, .unauthenticated, reason: authorization.refusal(needs: permission, send: Self.sendKey) ?? "")
        case .denied:
            throw HTTPAPIError(.forbidden, .forbidden, reason: authorization.refusal(needs: permission, send: Self.sendKey) ?? "")
        }
    }

    /// The `Idempotency-Key` header: a string of 1 to 255 printable ASCII characters, bare or
    /// quoted as a structured-field string (`"…"`); `nil` when absent.
    static func idempotencyKey(_ headers: HTTPFields) throws(HTTPAPIError) -> String? {
        let values = headers[values: idempotencyKeyHeader]
        guard let value = values.first else { return nil }
        var key = Substring(value)
        if key.count >= 2, key.hasPrefix("\""), key.hasSuffix("\"") { key = key.dropFirst().dropLast() }
        guard values.count == 1, (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "\"") }) else {
            throw HTTPAPIError(
                .badRequest, .invalidField, field: "Idempotency-Key", reason: "must be one key of 1 to 255 printable ASCII characters without spaces or quotes")
        }
        return String(key)
    }
}
