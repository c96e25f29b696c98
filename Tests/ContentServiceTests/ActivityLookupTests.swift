import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import IsletKafka
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import ContentService

@Suite("The backends' HTTP API: an activity's state and its latest outcomes", .timeLimit(.minutes(1)))
struct ActivityLookupTests {
    static let readerKey = String(repeating: "r", count: 40)
    static let writerOnlyKey = String(repeating: "w", count: 40)
    static let uri = "/v1/activities/order-42?bundleId=com.example.food"
    static let outcomesURI = "/v1/activities/order-42/outcomes?bundleId=com.example.food"

    let clock = ManualClock(now)
    let published = RecordingEvents()
    let engine: ContentEngine
    let world = World()

    final class World: Sendable {
        /// What the lookups read "from Kafka", by position.
        let stored = Mutex<[KafkaPosition: PushOutcome]>([:])
        /// The push requests the content lookup reads "from Kafka", by position.
        let requests = Mutex<[KafkaPosition: PushRequest]>([:])
        let kafkaAnswers = Mutex(true)
        /// The partitions the instance owns (the activity is in 3).
        let owned = Mutex<Set<Int32>>([3])
    }

    let tokens = PartitionTokens.whole()

    init() throws {
        let record = TokenRecord(
            kind: .update, activityId: "order-42", userId: "alice", token: String(repeating: "ab", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: now, updatedAt: now)
        tokens.put(record, key: record.key!)
        engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: clock)
    }

    func withAPI(ready: Bool = true, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let (published, world) = (self.published, self.world)
        let intake = EventIntake(engine: engine, isReady: { ready }) { try published.publish($0) }
        let keys = try BackendKeys(["dashboard": Self.readerKey + ":read", "orders": Self.writerOnlyKey + ":write"])
        let lookup = ActivityLookup(
            partition: { _ in 3 }, owned: { world.owned.withLock { $0 } },
            readOutcomes: { positions throws(ActivityLookup.Unavailable) in
                guard world.kafkaAnswers.withLock({ $0 }) else { throw ActivityLookup.Unavailable("the outcomes could not be read from Kafka now") }
                return world.stored.withLock { stored in stored.filter { positions.contains($0.key) } }
            },
            readRequest: { position, requestId throws(ActivityLookup.Unavailable) in
                guard world.kafkaAnswers.withLock({ $0 }) else { throw ActivityLookup.Unavailable("the latest payload could not be read from Kafka now") }
                return world.requests.withLock { $0[position] }.flatMap { $0.requestId == requestId ? $0 : nil }
            })
        let router = Router()
        router.add(middleware: HTTPErrorMiddleware(logger: ActivityHTTPAPITests.logger))
        ActivityHTTPAPI(intake: intake, keys: keys, lookup: lookup).addRoutes(to: router)
        try await Application(router: router, logger: ActivityHTTPAPITests.logger).test(.router) { client in try await body(client) }
    }

    /// Sends an update through the engine, as the owner does when it reads the event.
    func send(_ sequence: Int64, _ status: String) throws -> PushRequest {
        let prepared = try #require(
            {
                if case .send(let prepared) = try engine.prepare(
                    event("DeliveryAttributes", sequence: sequence, ["orderId": .string("42"), "status": .string(status), "progress": .integer(40)]))
                {
                    return prepared
                }
                return nil
            }())
        engine.commit(prepared)
        return prepared.requests[0]
    }

    /// The dispatcher's answer to `request`, read at `offset` of partition 3 of the outcomes.
    func answer(_ request: PushRequest, _ result: PushResult, offset: Int64, after seconds: TimeInterval, status: Int? = 200) {
        let outcome = PushOutcome(
            requestId: request.requestId, activityId: "order-42", result: result,
            apns: status.map {
                PushOutcome.APNsResponse(
                    status: $0, reason: $0 == 200 ? nil : "BadDeviceToken", apnsId: request.requestId, uniqueId: $0 == 200 ? "u-\(request.requestId)" : nil)
            },
            priorityUsed: 10, attempts: 1, completedAt: now.addingTimeInterval(seconds), bundleId: app.bundleId)
        let position = KafkaPosition(partition: 3, offset: offset)
        world.stored.withLock { $0[position] = outcome }
        engine.record(outcome, at: position)
    }

    static func headers(_ key: String?) -> HTTPFields { key.map { [.authorization: "Bearer \($0)"] } ?? [:] }

    static func decode<T: Decodable>(_ type: T.Type, _ response: TestResponse) throws -> T {
        #expect(response.headers[.contentType] == "application/json")
        return try IsletJSON.decodeValue(type, from: Array(response.body.readableBytesView))
    }

    @Test("the state: the token, the last sequence and state, the latest request and its outcome, freshness as time goes by, a token APNs rejected")
    func state() async throws {
        let request = try send(1, "preparing")
        try await withAPI { [self] client in
            var seen: ActivityHTTPAPI.ActivityState?
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .ok)
                seen = try Self.decode(ActivityHTTPAPI.ActivityState.self, response)
            }
            let state = try #require(seen)
            #expect(state.activityId == "order-42" && state.bundleId == "com.example.food" && state.partition == 3)
            #expect(state.token == "active" && state.tokenRegisteredAt == now && state.tokenRejectedAt == nil)
            #expect(state.attributesType == "DeliveryAttributes" && state.lastSequence == 1 && state.state == request.state)
            #expect(state.live && !state.ended && state.freshness == "fresh" && !state.stale && state.resends == 0)
            #expect(state.latestRequest?.requestId == request.requestId && state.latestRequest?.event == "update")
            #expect(state.latestRequest?.content == true && state.latestRequest?.pushToStart == false && state.latestRequest?.outcome == nil)

            answer(request, .delivered, offset: 10, after: 1)
            clock.advance(3_600)  // far past its stale date
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                let state = try Self.decode(ActivityHTTPAPI.ActivityState.self, response)
                #expect(state.latestRequest?.outcome == "delivered")
                #expect(state.stale && state.staleSince != nil && state.freshness == "severelyStale")
            }

            // APNs rejects the token: not live, the token "rejected" with when.
            let next = try send(2, "out_for_delivery")
            answer(next, .tokenInvalid, offset: 11, after: 3_601, status: 410)
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                let state = try Self.decode(ActivityHTTPAPI.ActivityState.self, response)
                #expect(state.token == "rejected" && state.tokenRejectedAt == now.addingTimeInterval(3_601))
                #expect(!state.live && state.freshness == nil && !state.stale && state.lastSequence == 2)
            }
        }
        #expect(published.events.isEmpty, "asking publishes nothing")
    }

    @Test("the outcomes: the latest four the memory kept, latest first, read where they are; limit; an outcome no longer on Kafka is left out")
    func outcomes() async throws {
        var sent: [PushRequest] = []
        for sequence in 1...5 {
            let request = try send(Int64(sequence), sequence == 5 ? "delivered" : "preparing")
            sent.append(request)
            answer(request, sequence == 3 ? .coalesced : .delivered, offset: Int64(20 + sequence), after: Double(sequence))
        }
        let requests = sent
        #expect(engine.memory(of: "com.example.food/order-42")?.outcomePositions.map(\.offset) == [25, 24, 23, 22])
        try await withAPI { [self] client in
            try await client.execute(uri: Self.outcomesURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .ok)
                let list = try Self.decode(ActivityHTTPAPI.OutcomeList.self, response)
                #expect(list.activityId == "order-42" && list.bundleId == "com.example.food")
                #expect(list.outcomes.map(\.requestId) == requests[1...].reversed().map(\.requestId))
                #expect(list.outcomes.map(\.result) == ["delivered", "delivered", "coalesced", "delivered"])
                #expect(list.outcomes.first?.apnsStatus == 200 && list.outcomes.first?.priority == 10 && list.outcomes.first?.attempts == 1)
                #expect(list.outcomes.first.map { $0.apnsUniqueId == "u-\($0.requestId)" } == true, "the delivery log's key")
                #expect(list.outcomes.first?.completedAt == now.addingTimeInterval(5))
            }
            try await client.execute(uri: Self.outcomesURI + "&limit=2", method: .get, headers: Self.headers(Self.readerKey)) { response in
                let list = try Self.decode(ActivityHTTPAPI.OutcomeList.self, response)
                #expect(list.outcomes.map(\.requestId) == [requests[4].requestId, requests[3].requestId])
            }
            // One expired from the topic: the others are listed.
            _ = world.stored.withLock { $0.removeValue(forKey: KafkaPosition(partition: 3, offset: 24)) }
            try await client.execute(uri: Self.outcomesURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                let list = try Self.decode(ActivityHTTPAPI.OutcomeList.self, response)
                #expect(list.outcomes.count == 3)
            }
            // Kafka does not answer: 503 with Retry-After, to be asked again.
            world.kafkaAnswers.withLock { $0 = false }
            try await client.execute(uri: Self.outcomesURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] != nil)
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.error == .unavailable)
            }
        }
    }

    @Test(
        "refusals, each a JSON 4xx naming the problem: no key, a key that may not read, no or a bad bundleId, a bad id, a bad limit, an unknown activity, another instance's partition, starting",
        arguments: [
            (uri, nil as String?, 401, "unauthenticated", nil as String?),
            (outcomesURI, "not-a-configured-key-but-long-enough-to-be-one", 401, "unauthenticated", nil),
            (uri, writerOnlyKey, 403, "forbidden", nil),
            ("/v1/activities/order-42", readerKey, 400, "invalidField", "bundleId"),
            ("/v1/activities/order-42?bundleId=nodots", readerKey, 400, "invalidField", "bundleId"),
            ("/v1/activities/a:b?bundleId=com.example.food", readerKey, 400, "invalidField", "activityId"),
            ("/v1/activities/a%3Ab?bundleId=com.example.food", readerKey, 400, "invalidField", "activityId"),
            ("/v1/activities/a%FFb?bundleId=com.example.food", readerKey, 400, "invalidField", "activityId"),
            (outcomesURI + "&limit=0", readerKey, 400, "invalidField", "limit"),
            (outcomesURI + "&limit=many", readerKey, 400, "invalidField", "limit"),
            ("/v1/activities/order-43?bundleId=com.example.food", readerKey, 404, "notFound", "activityId"),
            ("/v1/activities/order-42?bundleId=com.example.other", readerKey, 404, "notFound", "activityId"),
        ])
    func refusals(uri: String, key: String?, status: Int, code: String, field: String?) async throws {
        try await withAPI { client in
            try await client.execute(uri: uri, method: .get, headers: Self.headers(key)) { response in
                #expect(response.status.code == status)
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.error.rawValue == code && body.field == field, "\(body.reason)")
                #expect(!body.reason.isEmpty)
                if status == 401 { #expect(response.headers[.wwwAuthenticate] == "Bearer") }
            }
        }
        #expect(published.events.isEmpty)
    }

    @Test("an id percent-encoded in the path is the same activity: order%2D42 is order-42")
    func percentEncodedId() async throws {
        _ = try send(1, "preparing")
        try await withAPI { client in
            try await client.execute(uri: "/v1/activities/order%2D42?bundleId=com.example.food", method: .get, headers: Self.headers(Self.readerKey)) {
                response in
                let state = try Self.decode(ActivityHTTPAPI.ActivityState.self, response)
                #expect(response.status == .ok && state.activityId == "order-42" && state.lastSequence == 1)
            }
        }
    }

    @Test("only the owner of the activity's partition answers (421 notOwner on an instance owning others); 503 on one owning none, and while starting")
    func ownerAndStarting() async throws {
        _ = try send(1, "preparing")
        world.owned.withLock { $0 = [1, 2] }
        try await withAPI { client in
            for uri in [Self.uri, Self.outcomesURI] {
                try await client.execute(uri: uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                    #expect(response.status == .misdirectedRequest)
                    let body = try Self.decode(HTTPAPIError.Body.self, response)
                    #expect(body.error == .notOwner && body.reason.contains("partition 3"))
                }
            }
        }
        // Holding no partition (its consumer rejoining after a broker stall): it cannot say who owns the activity.
        world.owned.withLock { $0 = [] }
        try await withAPI { client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "2")
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.error == .unavailable && body.reason.contains("holds no partition"))
            }
        }
        world.owned.withLock { $0 = [3] }
        try await withAPI(ready: false) { client in
            try await client.execute(uri: Self.uri, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "5")
            }
        }
    }

    static let contentURI = "/v1/activities/order-42/content?bundleId=com.example.food"

    @Test(
        "the content: the latest request's content state as the phone decodes it, read again from Kafka once the memory dropped it; 503 when Kafka does not answer, 404 when it is gone, 410 once ended"
    )
    func content() async throws {
        let request = try send(1, "preparing")
        let expected = try aps(request)
        try await withAPI { [self] client in
            func content() async throws -> ActivityHTTPAPI.ActivityContent {
                var seen: ActivityHTTPAPI.ActivityContent?
                try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                    #expect(response.status == .ok)
                    seen = try Self.decode(ActivityHTTPAPI.ActivityContent.self, response)
                }
                return try #require(seen)
            }
            // In memory: Kafka has not acknowledged the request yet.
            var answer = try await content()
            #expect(answer.contentState == expected["content-state"] && answer.sequence == 1 && answer.requestId == request.requestId)
            #expect(answer.state == "preparing" && answer.attributesType == "DeliveryAttributes" && answer.attributes == nil)
            if case .integer(let stale)? = expected["stale-date"] { #expect(answer.staleDate == Date(timeIntervalSince1970: TimeInterval(stale))) }

            // Stored: the memory drops the payload and the answer reads it where it is.
            let position = KafkaPosition(partition: 3, offset: 40)
            world.requests.withLock { $0[position] = request }
            engine.stored(request, at: position)
            #expect(engine.memory(of: "com.example.food/order-42")?.latestRequest == nil)
            world.kafkaAnswers.withLock { $0 = false }
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .serviceUnavailable && response.headers[.retryAfter] == "2")
            }
            world.kafkaAnswers.withLock { $0 = true }
            answer = try await content()
            #expect(answer.contentState == expected["content-state"] && answer.requestId == request.requestId)
            // Read once: kept until the next request, a second ask reads no Kafka.
            #expect(engine.memory(of: "com.example.food/order-42")?.latestRequest?.requestId == request.requestId)
            world.kafkaAnswers.withLock { $0 = false }
            answer = try await content()
            world.kafkaAnswers.withLock { $0 = true }

            // The next request is stored too, and is no longer on Kafka: 404, and the memory knows it is lost.
            let next = try send(2, "out_for_delivery")
            let nextPosition = KafkaPosition(partition: 3, offset: 41)
            engine.stored(next, at: nextPosition)
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .notFound)
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.reason.contains("no longer on Kafka"))
            }
            #expect(engine.memory(of: "com.example.food/order-42")?.payloadLost == true, "not asked for again")
            // Another app's activity of the same id is another activity.
            try await client.execute(uri: "/v1/activities/order-42/content?bundleId=com.example.ride", method: .get, headers: Self.headers(Self.readerKey)) {
                #expect($0.status == .notFound)
            }

            // A backend key without read, none, an activity nobody announced.
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.writerOnlyKey)) { #expect($0.status == .forbidden) }
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(nil)) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/v1/activities/order-43/content?bundleId=com.example.food", method: .get, headers: Self.headers(Self.readerKey)) {
                #expect($0.status == .notFound)
            }

            // Ended: nothing to start.
            let end = try #require(
                {
                    if case .send(let prepared) = try engine.prepare(event("DeliveryAttributes", .end, sequence: 3, ["orderId": .string("42"), "status": .string("delivered")])) {
                        return prepared
                    }
                    return nil
                }())
            engine.commit(end)
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .gone)
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.error == .ended)
            }
        }
        #expect(published.events.isEmpty, "asking publishes nothing")
    }

    @Test("no content to start with: a token the app or a backend ended (410, whatever the memory says), an activity started by push-to-start (409: the phone has it)")
    func contentRefused() async throws {
        _ = try send(1, "preparing")
        let ended = TokenRecord(
            kind: .update, activityId: "order-42", userId: "alice", token: String(repeating: "ab", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "9.0", state: .invalidated,
            invalidation: .init(reason: .clientEnded, invalidatedAt: now), registeredAt: now, updatedAt: now)
        tokens.put(ended, key: ended.key!)
        let pushToStart = TokenRecord(
            kind: .pushToStart, deviceId: "d1", userId: "alice", token: String(repeating: "cd", count: 32), app: app, attributesType: "DeliveryAttributes",
            frequentUpdatesEnabled: false, appVersion: "9.0", state: .active, registeredAt: now, updatedAt: now)
        tokens.put(pushToStart, key: pushToStart.key!)
        var started = event("DeliveryAttributes", .start, sequence: 1, ["orderId": .string("44"), "status": .string("preparing")], startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("44")])
        started.activityId = "order-44"
        guard case .send(let prepared) = try engine.prepare(started) else { Issue.record("the start was not sent"); return }
        engine.commit(prepared)
        try await withAPI { client in
            try await client.execute(uri: Self.contentURI, method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .gone)
            }
            try await client.execute(uri: "/v1/activities/order-44/content?bundleId=com.example.food", method: .get, headers: Self.headers(Self.readerKey)) { response in
                #expect(response.status == .conflict)
                let body = try Self.decode(HTTPAPIError.Body.self, response)
                #expect(body.reason.contains("push-to-start"))
            }
        }
    }

    @Test("an activity's outcome positions: the latest four, the latest first, a position read twice kept once, carried through the changelog")
    func outcomePositions() throws {
        var memory = ActivityMemory()
        let outcome = PushOutcome(requestId: "r", activityId: "order-42", result: .delivered, attempts: 1, completedAt: now)
        for offset in [5, 6, 6, 7, 8, 9] as [Int64] { memory.record(outcome, at: KafkaPosition(partition: 2, offset: offset)) }
        memory.record(outcome, at: KafkaPosition(partition: 7, offset: 0))
        #expect(memory.outcomePositions == [.init(partition: 7, offset: 0), .init(partition: 2, offset: 9), .init(partition: 2, offset: 8), .init(partition: 2, offset: 7)])
        memory.record(outcome, at: KafkaPosition(partition: 2, offset: 8))
        #expect(memory.outcomePositions.count == 4 && memory.outcomePositions.first == .init(partition: 7, offset: 0), "read again: no change")
        let restored = ActivityMemory(memory.record(activityKey: "com.example.food/order-42", partition: 3))
        #expect(restored.outcomePositions == memory.outcomePositions)
        #expect(MemoryLayout<OutcomePositions>.size == 32)
        #expect(MemoryLayout<ActivityMemory>.stride <= 176, "an activity's memory: 144 bytes, and 32 for where its latest outcomes are")
        #expect(ActivityMemory().record(activityKey: "com.example.food/order-42", partition: 3).outcomePositions == nil, "none: not written")
    }
}
