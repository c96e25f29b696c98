import ArgumentParser
import Crypto
import Foundation
import IsletKafka
import IsletMessages
import IsletProtos
import JWTKit
import SwiftProtobuf
import Testing
@testable import IsletCLI

private let now = Date(timeIntervalSince1970: 1_795_342_530.123)

private func parse<Command: ParsableCommand>(_ type: Command.Type, _ arguments: [String]) throws -> Command {
    let parsed = try Islet.parseAsRoot(arguments)
    return try #require(parsed as? Command, "parsed \(Swift.type(of: parsed)), not \(Command.self)")
}

@Suite struct PublishEventArgumentTests {
    @Test func flagsBuildTheEvent() throws {
        let command = try parse(PublishEvent.self, [
            "publish-event", "--activity", "order-42", "--type", "DeliveryAttributes", "--kind", "update", "--urgency", "important",
            "--field", "status=out_for_delivery", "-f", "courier.name=Ana", "--field", "courier.rating=4.5", "--field", "progress=60",
            "--field", "orderId=\"42\"", "--field", "late=false", "--sequence", "5", "--event-id", "e-1",
            "--occurred-at", "2026-11-22T10:15:30.214Z", "--bootstrap", "kafka:9092",
        ])
        let event = try command.event(now: now)
        #expect(event.activityId == "order-42")
        #expect(event.kind == .update)
        #expect(event.urgency == .important)
        #expect(event.attributesType == "DeliveryAttributes")
        #expect(event.sequence == 5)
        #expect(event.eventId == "e-1")
        #expect(event.occurredAt == IsletDate.parse("2026-11-22T10:15:30.214Z"))
        #expect(event.fields == [
            "status": .string("out_for_delivery"), "courier": .object(["name": .string("Ana"), "rating": .number(4.5)]),
            "progress": .integer(60), "orderId": .string("42"), "late": .bool(false),
        ])
        #expect(event.source == "islet-cli")
        #expect(event.startTarget == nil)
        #expect(command.kafka.servers(environment: [:]) == "kafka:9092")
        #expect(event.key == "order-42")
    }

    @Test func defaultsComeFromTheClockAndANewID() throws {
        let command = try parse(PublishEvent.self, ["publish-event", "--activity", "a1", "--type", "RideAttributes"])
        let event = try command.event(now: now, newID: { "fresh-id" })
        #expect(event.kind == .update)
        #expect(event.urgency == .routine)
        #expect(event.eventId == "fresh-id")
        #expect(event.occurredAt == now)
        #expect(event.sequence == 1_795_342_530_123)
        #expect(event.fields.isEmpty)
        #expect(command.kafka.servers(environment: ["ISLET_KAFKA_BOOTSTRAP": "broker:1"]) == "broker:1")
        #expect(command.kafka.servers(environment: [:]) == "localhost:9094")
    }

    @Test func pushToStartNeedsBundleAndDevice() throws {
        let command = try parse(PublishEvent.self, [
            "publish-event", "--activity", "order-7", "--type", "DeliveryAttributes", "--kind", "start", "--start-bundle-id",
            "com.example.food", "--start-device-id", "dev-1", "--start-environment", "sandbox", "--attribute", "orderId=7",
            "--fields", #"{"status": "placed"}"#, "--field", "eta.minutes=30",
        ])
        let event = try command.event(now: now)
        #expect(event.startTarget == .init(app: AppTarget(bundleId: "com.example.food", environment: .sandbox), deviceId: "dev-1"))
        #expect(event.attributes == ["orderId": .integer(7)])
        #expect(event.fields == ["status": .string("placed"), "eta": .object(["minutes": .integer(30)])])

        let half = try parse(PublishEvent.self, ["publish-event", "--activity", "o", "--type", "T", "--kind", "start", "--start-bundle-id", "com.x.y"])
        #expect(throws: ValidationError.self) { try half.event(now: now) }
        // A start target on an update breaks the event's own rule.
        let onUpdate = try parse(PublishEvent.self, [
            "publish-event", "--activity", "o", "--type", "T", "--start-bundle-id", "com.x.y", "--start-device-id", "d",
        ])
        #expect(throws: ValidationError.self) { try onUpdate.event(now: now) }
        // Every device of a user; a device and a user at once is refused.
        let user = try parse(PublishEvent.self, [
            "publish-event", "--activity", "o", "--type", "T", "--kind", "start", "--start-bundle-id", "com.x.y", "--start-user-id", "ana",
        ])
        #expect(try user.event(now: now).startTarget == .init(app: AppTarget(bundleId: "com.x.y", environment: .production), userId: "ana"))
        let both = try parse(PublishEvent.self, [
            "publish-event", "--activity", "o", "--type", "T", "--kind", "start", "--start-bundle-id", "com.x.y", "--start-user-id", "ana",
            "--start-device-id", "d",
        ])
        #expect(throws: ValidationError.self) { try both.event(now: now) }
    }

    @Test(arguments: [
        ["--kind", "restart"], ["--urgency", "urgent"], ["--field", "noequals"], ["--field", "=value"], ["--field", "a..b=1"],
        ["--field", "a=1", "--field", "a=2"], ["--field", "a=1", "--field", "a.b=2"], ["--fields", "[1,2]"],
        ["--occurred-at", "yesterday"], ["--sequence=-1"],
    ])
    func badFlagsAreRefused(extra: [String]) throws {
        let command = try parse(PublishEvent.self, ["publish-event", "--type", "DeliveryAttributes", "--activity", "order-1"] + extra)
        #expect(throws: ValidationError.self) { try command.event(now: now) }
    }

    @Test func activityIdsWithAColonAreRefused() throws {
        let command = try parse(PublishEvent.self, ["publish-event", "--type", "DeliveryAttributes", "--activity", "pts:x"])
        #expect(throws: ValidationError.self) { try command.event(now: now) }
    }

    @Test func jsonIsTheWholeEvent() throws {
        let json = #"{"schemaVersion": 1, "eventId": "x-1", "activityId": "order-9", "kind": "end", "attributesType": "DeliveryAttributes", "urgency": "routine", "sequence": 9, "occurredAt": "2026-11-22T10:15:30.214Z", "fields": {"status": "delivered"}}"#
        let command = try parse(PublishEvent.self, ["publish-event", "--json", "event.json"])
        let event = try command.event(now: now, readInput: { path in
            #expect(path == "event.json")
            return Data(json.utf8)
        })
        #expect(event.kind == .end)
        #expect(event.fields == ["status": .string("delivered")])
        // Not both: the flags would silently lose against the file.
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(["publish-event", "--json", "e.json", "--activity", "a"]) }
        // A bad document names what is wrong.
        let broken = try parse(PublishEvent.self, ["publish-event", "--json", "-"])
        #expect {
            try broken.event(now: now, readInput: { _ in Data(#"{"schemaVersion": 1, "eventId": "x"}"#.utf8) })
        } throws: { error in
            "\(error)".contains("activityId")
        }
    }

    @Test func requiredFlagsWithoutJSON() {
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(["publish-event", "--type", "T"]) }
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(["publish-event", "--activity", "a"]) }
    }
}

@Suite struct TailArgumentTests {
    @Test func shortNamesAndFullNames() throws {
        #expect(try TopicNames.resolve("events") == IsletTopics.activityEvents)
        #expect(try TopicNames.resolve("outcomes") == IsletTopics.pushOutcomes)
        #expect(try TopicNames.resolve("islet.dlq.v1") == IsletTopics.deadLetters)
        for topic in IsletTopics.all {
            #expect(try TopicNames.resolve(topic.name) == topic)
        }
        #expect(throws: ValidationError.self) { try TopicNames.resolve("islet.orders.v1") }
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(["tail", "orders"]) }
    }

    @Test func startPositions() throws {
        let byDefault = try parse(Tail.self, ["tail", "events"]).request(now: now, environment: [:])
        #expect(byDefault.since == now)
        #expect(byDefault.startOffset == nil)
        #expect(byDefault.follow)
        #expect(byDefault.servers == "localhost:9094")

        let sinceAge = try parse(Tail.self, ["tail", "tokens", "--since", "10m", "--no-follow", "--limit", "3", "--key", "order-42"])
            .request(now: now, environment: [:])
        #expect(sinceAge.since == now.addingTimeInterval(-600))
        #expect(!sinceAge.follow)
        #expect(sinceAge.limit == 3)
        #expect(sinceAge.key == "order-42")

        let sinceTime = try parse(Tail.self, ["tail", "clicks", "--since", "2026-11-22T10:00:00Z"]).request(now: now, environment: [:])
        #expect(sinceTime.since == IsletDate.parse("2026-11-22T10:00:00.000Z"))

        let fromOffset = try parse(Tail.self, ["tail", "dlq", "--offset", "17", "--partition", "2", "--partition", "0"]).request(now: now)
        #expect(fromOffset.startOffset == 17)
        #expect(fromOffset.since == nil)
        #expect(fromOffset.partitions == [2, 0])

        let everything = try parse(Tail.self, ["tail", "requests", "--from-beginning"]).request(now: now)
        #expect(everything.since == nil)
        #expect(everything.startOffset == nil)
    }

    @Test(arguments: [
        ["tail", "events", "--since", "10m", "--offset", "3"], ["tail", "events", "--from-beginning", "--since", "1h"],
        ["tail", "events", "--offset", "-1"], ["tail", "events", "--limit", "0"],
    ])
    func conflictingStartsAreRefused(arguments: [String]) {
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(arguments) }
    }

    @Test func sinceAges() throws {
        #expect(try SinceParsing.date("90s", now: now) == now.addingTimeInterval(-90))
        #expect(try SinceParsing.date("2h", now: now) == now.addingTimeInterval(-7_200))
        #expect(try SinceParsing.date("1.5d", now: now) == now.addingTimeInterval(-129_600))
        #expect(throws: ValidationError.self) { try SinceParsing.date("10 minutes", now: now) }
        #expect(throws: ValidationError.self) { try SinceParsing.date("-5m", now: now) }
    }
}

@Suite struct FormatterTests {
    private func record(_ topic: IsletTopic, _ value: [UInt8]?, key: String? = "order-42") -> KafkaMessage {
        KafkaMessage(
            topic: topic.name, partition: 3, offset: 17, key: key.map { Array($0.utf8) }, value: value,
            timestampMilliseconds: 1_795_342_530_123, headers: [])
    }

    @Test func tokenRecordsShowOnlyTheFingerprint() throws {
        let token = String(repeating: "80f3a1", count: 10) + "beef"
        let record = TokenRecord(
            kind: .update, activityId: "order-42", userId: "alice", token: token, app: AppTarget(bundleId: "com.example.food", environment: .production),
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.2.0", state: .active,
            registeredAt: now, updatedAt: now)
        let line = MessageFormatter.line(for: self.record(IsletTopics.tokens, try IsletJSON.encode(record)), topic: IsletTopics.tokens)
        #expect(!line.contains(token))
        #expect(!line.contains(token.prefix(16)))
        #expect(line.contains("token=\(TokenFingerprint.of(token: token))"))
        #expect(line.hasPrefix("2026-11-22T10:15:30.123Z 3@17 TokenRecord update com.example.food/order-42 state=active"))
        #expect(line.contains("app=com.example.food/production"))
        #expect(!line.contains("\n"))
    }

    @Test func eventsRequestsOutcomes() throws {
        let event = ActivityEvent(
            eventId: "e-1", activityId: "order-42", kind: .update, attributesType: "DeliveryAttributes",
            fields: ["status": .string("out_for_delivery"), "progress": .integer(60)], urgency: .important, occurredAt: now, sequence: 5)
        let eventLine = MessageFormatter.line(for: record(IsletTopics.activityEvents, try IsletJSON.encode(event)), topic: IsletTopics.activityEvents)
        #expect(eventLine == #"2026-11-22T10:15:30.123Z 3@17 ActivityEvent update order-42 DeliveryAttributes seq=5 urgency=important event=e-1 fields={"progress":60,"status":"out_for_delivery"}"#)

        let outcome = PushOutcome(
            requestId: "r-1", activityId: "order-42", result: .tokenInvalid, apns: .init(status: 410, reason: "Unregistered"),
            priorityUsed: 10, attempts: 2, latencyMilliseconds: 12.34, tokenFingerprint: "5d1c0c7a0e3b9f42", detail: "a \"quoted\"\nline",
            completedAt: now)
        let outcomeLine = MessageFormatter.body(for: record(IsletTopics.pushOutcomes, try IsletJSON.encode(outcome)), topic: IsletTopics.pushOutcomes)
        #expect(outcomeLine == #"PushOutcome tokenInvalid order-42 request=r-1 apns=410/Unregistered priority=10 attempts=2 latency=12.3ms token=5d1c0c7a0e3b9f42 detail="a \"quoted\"\nline""#)

        let broadcast = PushOutcome(
            requestId: "r-2", activityId: "match-7", result: .delivered, apns: .init(status: 200, uniqueId: "5b1a3c70-9d2e-4f18-8a64-c07e19d3b2f5"),
            priorityUsed: 10, attempts: 1, completedAt: now)
        let broadcastLine = MessageFormatter.body(for: record(IsletTopics.pushOutcomes, try IsletJSON.encode(broadcast)), topic: IsletTopics.pushOutcomes)
        #expect(broadcastLine == "PushOutcome delivered match-7 request=r-2 apns=200 apnsUniqueId=5b1a3c70-9d2e-4f18-8a64-c07e19d3b2f5 priority=10 attempts=1")
    }

    @Test func deadLettersNeverShowTheOriginalBytes() throws {
        let secret = "80f3" + String(repeating: "ab", count: 30)
        let letter = DeadLetterRecord(
            reason: .undecodable, detail: "bad JSON", origin: .init(topic: "islet.tokens.v1", partition: 1, offset: 9),
            originalKey: "order-1", originalValue: Array(#"{"token": "\#(secret)"}"#.utf8), service: "content-service", deadLetteredAt: now)
        let line = MessageFormatter.body(for: record(IsletTopics.deadLetters, try IsletJSON.encode(letter)), topic: IsletTopics.deadLetters)
        #expect(line.hasPrefix("DeadLetter reason=undecodable service=content-service from=islet.tokens.v1[1]@9 key=order-1 size="))
        #expect(!line.contains(secret))
        #expect(!line.contains(Data(secret.utf8).base64EncodedString().prefix(20)))
    }

    @Test func undecodableAndTombstones() {
        let bad = MessageFormatter.body(for: record(IsletTopics.pushRequests, Array(#"{"schemaVersion": 1}"#.utf8)), topic: IsletTopics.pushRequests)
        #expect(bad.hasPrefix("undecodable key=order-42 (20 bytes): PushRequest: required field"))
        let newer = MessageFormatter.body(for: record(IsletTopics.clicks, Array(#"{"schemaVersion": 99}"#.utf8)), topic: IsletTopics.clicks)
        #expect(newer.contains("schemaVersion 99 is not supported"))
        #expect(MessageFormatter.body(for: record(IsletTopics.tokens, nil), topic: IsletTopics.tokens) == "tombstone key=order-42")
    }
}

@Suite struct LookupFormattingTests {
    @Test func activityState() {
        let state = Islet_Tokens_V1_ActivityState.with {
            $0.activityID = "order-42"
            $0.userID = "alice"
            $0.kind = "update"
            $0.state = "invalidated"
            $0.bundleID = "com.example.food"
            $0.environment = "sandbox"
            $0.attributesType = "DeliveryAttributes"
            $0.frequentUpdatesEnabled = true
            $0.appVersion = "5.2.0"
            $0.tokenFingerprint = "5d1c0c7a0e3b9f42"
            $0.invalidationReason = "apnsUnregistered"
            $0.invalidatedAt = Google_Protobuf_Timestamp(date: now)
            $0.registeredAt = Google_Protobuf_Timestamp(date: now.addingTimeInterval(-60))
        }
        let lines = ActivityCommand.describe(state).split(separator: "\n").map(String.init)
        #expect(lines.first == "activity          order-42")
        #expect(lines.contains("token             5d1c0c7a0e3b9f42 (fingerprint)"))
        #expect(lines.contains("app               com.example.food (sandbox)"))
        #expect(lines.contains("invalidated       apnsUnregistered"))
        #expect(lines.contains("invalidated at    2026-11-22T10:15:30.123Z"))
        #expect(lines.contains("registered at     2026-11-22T10:14:30.123Z"))
        #expect(!lines.contains { $0.hasPrefix("started at") })
    }

    @Test("--key: an activity id matches every app's activity of that id; an app's activity, or a push-to-start key, only itself")
    func tailKeys() {
        var request = TailRequest(topic: IsletTopics.tokens, servers: "-")
        #expect(request.matches("com.example.food/order-42") && request.matches(nil), "no --key: everything")
        request.key = "order-42"
        #expect(request.matches("order-42") && request.matches("com.example.food/order-42") && request.matches("com.example.ride/order-42"))
        #expect(!request.matches("com.example.food/order-421") && !request.matches("border-42") && !request.matches(nil))
        request.key = "com.example.food/order-42"
        #expect(request.matches("com.example.food/order-42") && !request.matches("com.example.ride/order-42") && !request.matches("order-42"))
        request.key = "pts:com.example.ride:d1:RideAttributes"
        #expect(request.matches("pts:com.example.ride:d1:RideAttributes") && !request.matches("x/pts:com.example.ride:d1:RideAttributes"))
    }

    @Test func staleActivities() throws {
        let activities = [
            Islet_Content_V1_StaleActivity.with {
                $0.activityID = "ride-7"
                $0.attributesType = "RideAttributes"
                $0.freshness = "severelyStale"
                $0.staleSince = Google_Protobuf_Timestamp(date: now.addingTimeInterval(-3_900))
                $0.contentSequence = 12
                $0.resends = 3
            }
        ]
        #expect(StaleCommand.describe(activities, now: now)
            == "ride-7  RideAttributes  severelyStale  stale since 2026-11-22T09:10:30.123Z (1h 5m ago)  content seq 12  resends 3")
        #expect(StaleCommand.describe([], now: now) == "no stale activities")
        var named = activities
        named[0].bundleID = "com.example.ride"
        #expect(StaleCommand.describe(named, now: now).hasPrefix("com.example.ride/ride-7  RideAttributes"))
        #expect(StaleCommand.age(45) == "45s")
        #expect(StaleCommand.age(720) == "12m")
        #expect(StaleCommand.age(7_200) == "2h")
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(["stale", "--limit", "0"]) }
        #expect(try HostPort.resolve(nil, variable: "X", default: "localhost:9083", environment: [:]) == HostPort(host: "localhost", port: 9083))
        #expect(try HostPort.resolve(nil, variable: "X", default: "localhost:9083", environment: ["X": "[::1]:9"]) == HostPort(host: "::1", port: 9))
        #expect(throws: ValidationError.self) { try HostPort.resolve("registry", variable: "X", default: "", environment: [:]) }
    }
}

@Suite struct RegisterTokenTests {
    private let base = [
        "register-token", "--activity", "order-42", "--type", "DeliveryAttributes", "--bundle-id", "com.example.food",
    ]

    @Test func bodyAndURL() throws {
        let command = try parse(RegisterToken.self, base + [
            "--token", "80F3AB", "--frequent-updates", "--app-version", "5.2.0", "--environment", "sandbox",
            "--activity-started-at", "2026-11-22T12:41:00Z", "--jwt", "a.b.c", "--registry", "http://registry:8081/",
        ])
        let body = command.body(now: now)
        #expect(body == TokenRegistrationBody(
            token: "80F3AB", attributesType: "DeliveryAttributes", app: .init(bundleId: "com.example.food", environment: "sandbox"),
            frequentUpdatesEnabled: true, appVersion: "5.2.0", activityStartedAt: IsletDate.parse("2026-11-22T12:41:00Z")!, deviceId: nil))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(IsletJSON.encode(body))) as? [String: Any])
        #expect(json["activityStartedAt"] as? String == "2026-11-22T12:41:00.000Z")
        #expect((json["app"] as? [String: String]) == ["bundleId": "com.example.food", "environment": "sandbox"])
        #expect(json["deviceId"] == nil)
        #expect(try command.url(environment: [:]) == "http://registry:8081/v1/activities/order-42/token")

        let generated = try parse(RegisterToken.self, base + ["--jwt", "x"]).body(now: now, randomToken: { "ab" })
        #expect(generated.token == "ab")
        #expect(generated.activityStartedAt == now)
        #expect(!generated.frequentUpdatesEnabled)
        let random = TestToken.random()
        #expect(random.count == 64)
        #expect(random.allSatisfy { $0.isHexDigit })
        #expect(random != TestToken.random())
    }

    @Test func needsExactlyOneWayToAuthenticate() throws {
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(base + ["--jwt", "a", "--hs256-key", "k=s"]) }
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(base + ["--hs256-key", "nokid"]) }
        #expect(throws: (any Error).self) { try Islet.parseAsRoot(base + ["--environment", "staging", "--jwt", "a"]) }
        let bare = try Islet.parseAsRoot(base + ["--jwt", "a"]) as! RegisterToken
        #expect(try bare.auth.source(environment: ["ISLET_CLI_HS256_KEY": "k=s"]) == .given("a"))
        let fromEnvironment = try Islet.parseAsRoot(base + ["--user", "bob", "--jwt", "placeholder"]) as! RegisterToken
        var auth = fromEnvironment.auth
        auth.jwt = nil
        #expect(try auth.source(environment: ["ISLET_CLI_HS256_KEY": "app=secret"]) == .hs256(kid: "app", secret: "secret"))
        #expect(try auth.source(environment: [:]) == .none)
        #expect(throws: ValidationError.self) { try auth.check(environment: [:]) }
    }

    @Test func signsAJWTTheRegistryAccepts() async throws {
        let secret = String(repeating: "s", count: 40)
        let command = try parse(RegisterToken.self, base + ["--hs256-key", "app=\(secret)", "--user", "alice", "--audience", "islet"])
        let jwt = try await command.auth.bearer(now: Date())
        let header = try DefaultJWTParser().parse(Array(jwt.utf8), as: BearerClaims.self).header
        #expect(header.alg == "HS256")
        #expect(header.kid == "app")

        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: "app"))
        let claims = try await keys.verify(jwt, as: BearerClaims.self)
        #expect(claims.sub.value == "alice")
        #expect(claims.aud?.value == ["islet"])
        #expect(claims.exp.value > Date())

        let wrong = JWTKeyCollection()
        await wrong.add(hmac: HMACKey(from: String(repeating: "t", count: 40)), digestAlgorithm: .sha256, kid: JWKIdentifier(string: "app"))
        await #expect(throws: (any Error).self) { try await wrong.verify(jwt, as: BearerClaims.self) }
    }

    @Test func signsWithAnES256Key() async throws {
        let key = P256.Signing.PrivateKey()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("islet-cli-\(UUID().uuidString).pem").path
        try key.pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let command = try parse(RegisterToken.self, base + ["--es256-key", "es=\(path)"])
        let jwt = try await command.auth.bearer(now: Date())
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PublicKey(pem: key.publicKey.pemRepresentation), kid: JWKIdentifier(string: "es"))
        #expect(try await keys.verify(jwt, as: BearerClaims.self).sub.value == "islet-cli")
    }

    @Test func answersInOneLine() {
        let ok = #"{"change": "registered", "token": {"kind": "update", "activityId": "order-42", "state": "active", "tokenFingerprint": "5d1c0c7a0e3b9f42"}}"#
        #expect(RegistryAnswer.describe(status: 201, body: Array(ok.utf8), activityId: "order-42")
            == "201 registered order-42: state active, token 5d1c0c7a0e3b9f42")
        let refused = #"{"error": "invalidField", "field": "token", "reason": "must have an even number of hex digits, got 63"}"#
        #expect(RegistryAnswer.describe(status: 400, body: Array(refused.utf8), activityId: "a")
            == "400 invalidField field token: must have an even number of hex digits, got 63")
        #expect(RegistryAnswer.describe(status: 502, body: Array("bad gateway".utf8), activityId: "a") == "502: bad gateway")
    }
}
