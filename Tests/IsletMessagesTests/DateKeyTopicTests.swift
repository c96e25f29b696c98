import Foundation
import IsletMessages
import Testing

@Suite("Dates")
struct DateTests {
    @Test func formatIsUTCWithMilliseconds() {
        #expect(IsletDate.format(utc(2026, 11, 22, 10, 15, 30, 123)) == "2026-11-22T10:15:30.123Z")
        #expect(IsletDate.format(utc(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000Z")
        #expect(IsletDate.format(utc(2026, 11, 22, 23, 59, 59, 999)) == "2026-11-22T23:59:59.999Z")
        #expect(IsletDate.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(IsletDate.format(Date(timeIntervalSince1970: -0.001)) == "1969-12-31T23:59:59.999Z")
    }

    /// Most millisecond values have no exact `Double`: `.123` is stored just below. Each must
    /// still be written as itself, not one millisecond early.
    @Test func everyMillisecondIsWrittenAsItself() throws {
        let pattern = try Regex(#"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#)
        for millisecond in 0..<1_000 {
            let text = IsletDate.format(utc(2026, 11, 22, 10, 15, 30, millisecond))
            let expected = "2026-11-22T10:15:30." + String(repeating: "0", count: 3 - String(millisecond).count) + String(millisecond) + "Z"
            #expect(text == expected)
            #expect(text.wholeMatch(of: pattern) != nil)
        }
    }

    @Test func formatRoundsDownToTheMillisecond() {
        let date = Date(timeIntervalSince1970: utc(2026, 11, 22, 10, 15, 30, 123).timeIntervalSince1970 + 0.000_9)
        #expect(IsletDate.format(date) == "2026-11-22T10:15:30.123Z")
        #expect(IsletDate.truncatedToMilliseconds(date) == utc(2026, 11, 22, 10, 15, 30, 123))
    }

    @Test(
        arguments: [
            ("2026-11-22T10:15:30.123Z", utc(2026, 11, 22, 10, 15, 30, 123)),
            ("2026-11-22T12:15:30.123+02:00", utc(2026, 11, 22, 10, 15, 30, 123)),
            ("2026-11-22T05:15:30.123-05:00", utc(2026, 11, 22, 10, 15, 30, 123)),
            ("2026-11-22T12:15:30+02:00", utc(2026, 11, 22, 10, 15, 30)),
            ("2026-11-22T10:15:30Z", utc(2026, 11, 22, 10, 15, 30)),
            ("2026-11-22T10:15:30.5Z", utc(2026, 11, 22, 10, 15, 30, 500)),
            ("2026-11-22T10:15:30.12Z", utc(2026, 11, 22, 10, 15, 30, 120)),
            ("2026-11-22T10:15:30.123999Z", utc(2026, 11, 22, 10, 15, 30, 123)),
            ("2026-11-23T00:30:00.000+01:00", utc(2026, 11, 22, 23, 30, 0)),
            ("1969-12-31T23:59:59.999Z", Date(timeIntervalSince1970: -0.001)),
        ])
    func parse(_ text: String, _ expected: Date) {
        #expect(IsletDate.parse(text) == expected)
    }

    @Test(arguments: ["", "yesterday", "2026-11-22", "2026-11-22T10:15:30", "2026-11-22T10:15:30.123", "2026-11-22T10:15:30.Z", "2026-11-22 10:15:30Z", "2026-11-22T10:15:30.12x3Z", "1795342530"])
    func parseRejects(_ text: String) {
        #expect(IsletDate.parse(text) == nil)
    }

    @Test func roundTripKeepsMilliseconds() throws {
        let base = utc(2026, 11, 22, 10, 15, 30).timeIntervalSince1970
        for step in 0..<5_000 {
            // Milliseconds, and dates between them (microseconds, as `Date()` gives).
            let exact = utc(2026, 11, 22, 10, 15, 30, step % 1_000)
            #expect(IsletDate.parse(IsletDate.format(exact)) == exact)
            let between = Date(timeIntervalSince1970: base + Double(step) * 0.000_731)
            let back = try #require(IsletDate.parse(IsletDate.format(between)))
            #expect(back == IsletDate.truncatedToMilliseconds(between))
            // Below by less than a millisecond (or above by less than the microsecond of tolerance).
            #expect(between.timeIntervalSince(back) > -0.000_001 && between.timeIntervalSince(back) < 0.001)
        }
    }

    @Test func messageDatesSurviveEncoding() throws {
        var outcome = Examples.pushOutcome
        outcome.completedAt = Date(timeIntervalSince1970: 1_795_342_530.402_817)
        let decoded = try IsletJSON.decode(PushOutcome.self, from: IsletJSON.encode(outcome))
        #expect(decoded.completedAt == utc(2026, 11, 22, 10, 15, 30, 402))
        #expect(decoded != outcome)
        outcome.completedAt = IsletDate.truncatedToMilliseconds(outcome.completedAt)
        #expect(try IsletJSON.decode(PushOutcome.self, from: IsletJSON.encode(outcome)) == outcome)
    }

    @Test func decodingAcceptsOffsets() throws {
        let json = try Golden.json("ActivityEvent").setting("occurredAt", to: .string("2026-11-22T11:15:30.123+01:00"))
        let event = try IsletJSON.decode(ActivityEvent.self, from: GoldenCase.bytes(json))
        #expect(event == Examples.activityEvent)
        let encoded = try IsletJSON.decodeValue(JSONValue.self, from: IsletJSON.encode(event))
        #expect(encoded["occurredAt"] == .string("2026-11-22T10:15:30.123Z"))
    }
}

@Suite("Record keys")
struct KeyTests {
    @Test func pushToStartKeyFormat() {
        #expect(
            MessageKey.pushToStart(bundleId: "com.example.fooddelivery", deviceId: "dev-1", attributesType: "DeliveryAttributes")
                == "pts:com.example.fooddelivery:dev-1:DeliveryAttributes")
        #expect(MessageKey.activity("order-42") == "order-42")
    }

    @Test func tokenKeys() {
        #expect(Examples.tokenRecord.key == "com.example.fooddelivery/order-42")
        #expect(Examples.tokenRecord.legacyKey == "order-42")
        #expect(Examples.tokenRecordInvalidated.key == "com.example.rides/ride-7f3a9c")
        #expect(Examples.tokenRecordPushToStart.legacyKey == nil)
        #expect(Examples.tokenRecordPushToStart.key == "pts:com.example.fooddelivery:5D3F8A2E-9C41-4B7A-8E06-1F2A3B4C5D6E:DeliveryAttributes")
        // The update token's key ignores its deviceId; a push-to-start token's ignores any activityId.
        var pushToStart = Examples.tokenRecordPushToStart
        pushToStart.activityId = "order-42"
        #expect(pushToStart.key == Examples.pushToStartKey)
        pushToStart.deviceId = nil
        #expect(pushToStart.key == nil)
        var update = Examples.tokenRecord
        update.activityId = nil
        #expect(update.key == nil)
    }

    @Test("an activity of an app is keyed <bundleId>/<activityId>, and partitioned by its activity id alone")
    func activityKeysAreScopedPerApp() {
        let food = MessageKey.activity(bundleId: "com.example.food", activityId: "order-42")
        let ride = MessageKey.activity(bundleId: "com.example.ride", activityId: "order-42")
        #expect(food == "com.example.food/order-42" && food != ride, "two apps' activities of one id are two keys")
        func partitionBytes(_ key: String) -> Substring {
            let bytes = Array(key.utf8)
            return Substring(decoding: bytes[MessageKey.partitionKeyRange(of: bytes)], as: UTF8.self)
        }
        #expect(partitionBytes(food) == "order-42" && partitionBytes(ride) == "order-42", "they land where the backend's event keyed order-42 does")
        #expect(partitionBytes("order-42") == "order-42")
        #expect(partitionBytes(Examples.pushToStartKey) == Substring(Examples.pushToStartKey), "a push-to-start key is hashed whole")
        #expect(partitionBytes("pts:com.example.food:dev/ice:T") == "pts:com.example.food:dev/ice:T", "a ':' before the '/': not an app's activity")
        #expect(partitionBytes("") == "")
        let device = MessageKey.device(bundleId: "com.example.food", activityId: "order-42", deviceId: "ipad-1")
        #expect(device == "com.example.food/order-42/ipad-1")
        #expect(partitionBytes(device) == "order-42", "one device's token of the activity lands in the activity's partition")
        #expect(MessageKey.partitionKeyStart(of: Array(device.utf8)) == "com.example.food/".utf8.count)
    }

    @Test("activity ids hold neither ':' nor '/'; an event's bundleId is a bundle id, and a push-to-start target's app is the event's")
    func activityIdsAndBundleIds() throws {
        for bad in ["order:42", "orders/42"] {
            var event = Examples.activityEvent
            event.activityId = bad
            #expect(throws: MessageValidationError.self) { try event.validate() }
        }
        for bad in ["", "food", "com..food", "com.example/food", "com.example.food:x"] {
            var event = Examples.activityEvent
            event.bundleId = bad
            #expect(throws: MessageValidationError.self, "\(bad)") { try event.validate() }
        }
        var event = Examples.activityEventPushToStart
        event.bundleId = "com.example.other"
        #expect { try event.validate() } throws: { ($0 as? MessageValidationError)?.field == "startTarget.app.bundleId" }
        event.bundleId = nil
        try event.validate()
    }

    @Test("a broadcast request updates or ends an activity with a storage policy of 0 or 1, up to 5 KB; a channel record names a base64 channel of a known environment")
    func broadcasts() throws {
        try Examples.pushRequestBroadcast.validate()
        var request = Examples.pushRequestBroadcast
        request.payload = #"{"aps":{"note":""# + String(repeating: "x", count: 5_000) + #""}}"#
        try request.validate()
        request.payload += String(repeating: " ", count: 5_121 - request.payload.utf8.count)
        #expect(validationError(request)?.field == "payload")
        request = Examples.pushRequestBroadcast
        request.channelStoragePolicy = 2
        #expect(validationError(request)?.field == "channelStoragePolicy")
        request.channelStoragePolicy = 0
        request.event = .start
        #expect(validationError(request)?.field == "channelStoragePolicy", "a broadcast never starts")
        var token = Examples.pushRequest
        token.payload = #"{"aps":{"note":""# + String(repeating: "x", count: 4_100) + #""}}"#
        #expect(validationError(token)?.field == "payload", "4 KB for a push to a token")

        var channel = Examples.broadcastChannelRecord
        #expect(channel.key == "com.example.scores/match-7")
        channel.channelId = "not base64!"
        #expect(validationError(channel)?.field == "channelId")
        channel = Examples.broadcastChannelRecord
        channel.storagePolicy = 3
        #expect(validationError(channel)?.field == "storagePolicy")
        channel = Examples.broadcastChannelRecord
        channel.activityId = "match/7"
        #expect(validationError(channel)?.field == "activityId")
    }

    @Test func activityEventKeyIsTheActivity() {
        #expect(Examples.activityEvent.key == "order-42")
        #expect(Examples.activityEventPushToStart.key == "order-42")
    }

    @Test func requestAndOutcomeShareTheTokenKey() {
        #expect(Examples.pushRequest.key == "com.example.fooddelivery/order-42")
        #expect(Examples.pushRequest.key == Examples.tokenRecord.key)
        #expect(Examples.pushRequestPushToStart.key == Examples.pushToStartKey)
        // A push-to-start request lands where its token is.
        #expect(Examples.pushRequestPushToStart.key == Examples.tokenRecordPushToStart.key)
        #expect(Examples.pushOutcome.key == "com.example.fooddelivery/order-42")
        #expect(Examples.pushOutcomeMinimal.key == "order-42", "an outcome written before outcomes named their app keeps the bare id")
        var outcome = Examples.pushOutcome
        outcome.activityId = nil
        outcome.pushToStartKey = Examples.pushToStartKey
        #expect(outcome.key == Examples.pushToStartKey)
    }

    @Test func clickKeys() {
        #expect(Examples.clickEvent.key == "order-42")
        #expect(Examples.rejectedClick.key == nil)
    }

    @Test func deadLetterKeepsTheOriginalKey() {
        #expect(Examples.deadLetterRecord.key == "order-42")
        var record = Examples.deadLetterRecord
        record.originalKey = nil
        #expect(record.key == nil)
    }
}

@Suite("Topics")
struct TopicTests {
    @Test func namesAreUniqueAndVersioned() {
        let names = IsletTopics.all.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(names.count == 10)
        for name in names {
            #expect(name.hasPrefix("islet.") && name.hasSuffix(".v1"), "\(name)")
            #expect(IsletTopics.named(name)?.name == name)
        }
        #expect(IsletTopics.named("islet.tokens.v2") == nil)
    }

    @Test func tokensAndContentMemoryAreCompactedAndTheRestExpire() {
        #expect(IsletTopics.tokens.cleanupPolicy == .compact)
        #expect(IsletTopics.tokens.retention == nil)
        #expect(IsletTopics.tokens.configs == ["cleanup.policy": "compact"])
        #expect(IsletTopics.contentMemory.configs == ["cleanup.policy": "compact", "segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.1"])
        #expect(IsletTopics.dispatchBudgets.configs == IsletTopics.contentMemory.configs)
        #expect(IsletTopics.broadcastChannels.configs == ["cleanup.policy": "compact"])
        for topic in IsletTopics.all where ![IsletTopics.tokens, IsletTopics.contentMemory, IsletTopics.dispatchBudgets, IsletTopics.broadcastChannels].contains(topic) {
            #expect(topic.cleanupPolicy == .delete, "\(topic)")
            #expect(topic.retention != nil, "\(topic)")
        }
        #expect(IsletTopics.activityEvents.configs == ["cleanup.policy": "delete", "retention.ms": "604800000"])
    }

    @Test func activityTopicsAreCoPartitioned() {
        let coPartitioned = IsletTopics.all.filter(\.coPartitioned).map(\.name)
        #expect(coPartitioned == [
            "islet.tokens.v1", "islet.activity-events.v1", "islet.push-requests.v1", "islet.push-outcomes.v1", "islet.content-memory.v1",
            "islet.dispatch-budgets.v1", "islet.broadcast-channels.v1",
        ])
    }

    @Test func eachTopicHasExactlyOneMessageType() {
        let topics: [IsletTopic] = [
            TokenRecord.topic, ActivityEvent.topic, PushRequest.topic, PushOutcome.topic, ContentMemoryRecord.topic, DispatchBudgetRecord.topic, BroadcastChannelRecord.topic,
            ClickEvent.topic,
            RejectedClick.topic,
            DeadLetterRecord.topic,
        ]
        #expect(topics == IsletTopics.all)
        #expect(MessageSchema.all.map(\.topic) == IsletTopics.all)
        for golden in GoldenCase.all {
            #expect(type(of: golden.expected).topic == golden.schema.topic, "\(golden.name)")
        }
    }
}

@Suite("Dates: Islet's own formatter and parser agree with Foundation's")
struct DateFastPathTests {
    @Test("for 20,000 dates from 1900 to 2200: the text is Foundation's, and parsing it gives the date back to the millisecond")
    func agreesWithFoundation() {
        var state: UInt64 = 0x1234_5678
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let milliseconds = Int64(bitPattern: state >> 1) % 9_467_280_000_000 - 2_208_988_800_000  // 1900 ... 2200
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
            let text = IsletDate.format(date)
            let (seconds, fraction) = milliseconds.quotientAndRemainder(dividingBy: 1_000)
            let whole = fraction < 0 ? seconds - 1 : seconds
            let foundation = Date(timeIntervalSince1970: Double(whole)).formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
            #expect(text.hasPrefix(String(foundation.dropLast())), "\(text) vs \(foundation)")
            #expect(IsletDate.parse(text) == IsletDate.truncatedToMilliseconds(date), "\(text)")
        }
    }

    @Test("far from 2001 too, a date read from the wire is written back as the same text (the topic fuzzer found year 911 a millisecond off)")
    func farDatesRoundTrip() throws {
        let found = "0911-11-22T10:17:12.004Z"
        #expect(IsletDate.format(try #require(IsletDate.parse(found))) == found)
        var state: UInt64 = 0x9e37_79b9
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            // 0000 ... 9999: every date the canonical form can hold.
            let milliseconds = Int64(bitPattern: state >> 1) % 315_569_520_000_000 - 62_167_219_200_000
            let date = Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
            let text = IsletDate.format(date)
            #expect(IsletDate.truncatedToMilliseconds(date) == date, "\(text)")
            #expect(IsletDate.format(try #require(IsletDate.parse(text))) == text)
        }
    }

    @Test(
        "dates outside the years 0000-9999 are refused when read (the topic fuzzer found year 200261 read, then written as text no reader accepts)",
        arguments: ["200261-1-22T10:16:05.611Z", "10000-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"])
    func yearsOutOfRange(text: String) {
        #expect(IsletDate.parse(text) == nil)
    }

    @Test("the last date in range reads through Foundation's parser too, and a date beyond what 64 bits of milliseconds hold is written without a trap")
    func rangeEnds() {
        #expect(IsletDate.parse("9999-12-31T23:59:59Z") == Date(timeIntervalSince1970: 253_402_300_799))
        #expect(IsletDate.range.upperBound == IsletDate.parse("9999-12-31T23:59:59.999Z"))
        #expect(IsletDate.range.lowerBound == IsletDate.parse("0000-01-01T00:00:00.000Z"))
        for far in [Date(timeIntervalSince1970: 1e16), Date(timeIntervalSince1970: -1e16)] {
            #expect(IsletDate.parse(IsletDate.format(far)) == nil)
        }
    }

    @Test("impossible dates in the canonical form are refused", arguments: [
        "2026-02-29T10:00:00.000Z", "2026-13-01T10:00:00.000Z", "2026-04-31T10:00:00.000Z", "2026-01-01T24:00:00.000Z",
        "2026-01-01T10:60:00.000Z", "2026-01-01T10:00:60.000Z", "2026-0a-01T10:00:00.000Z",
    ])
    func impossibleDates(text: String) {
        #expect(IsletDate.parse(text) == nil)
    }

    @Test("leap days parse")
    func leapDays() {
        #expect(IsletDate.parse("2024-02-29T23:59:59.999Z") != nil)
        #expect(IsletDate.parse("2000-02-29T00:00:00.000Z") != nil)
        #expect(IsletDate.parse("1900-02-29T00:00:00.000Z") == nil)
    }
}
