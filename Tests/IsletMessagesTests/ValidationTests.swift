import Foundation
import IsletMessages
import Testing

/// Each rule of `validate()`, with a message that breaks it and one that just keeps it.
@Suite("validate()")
struct ValidationTests {
    private func expectInvalid(_ message: any IsletMessage, field: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let error = validationError(message, sourceLocation: sourceLocation)
        #expect(error?.field == field, "\(error?.description ?? "no error")", sourceLocation: sourceLocation)
    }

    private func expectValid(_ message: any IsletMessage, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(throws: Never.self, sourceLocation: sourceLocation) { try message.validate() }
    }

    // MARK: TokenRecord

    @Test func tokenKindMustBeKnown() {
        var record = Examples.tokenRecord
        record.kind = TokenKind(rawValue: "liveWidget")
        expectInvalid(record, field: "kind")
        record.kind = .update
        expectValid(record)
    }

    @Test func updateTokenNeedsActivityId() {
        var record = Examples.tokenRecord
        record.activityId = nil
        expectInvalid(record, field: "activityId")
        record.activityId = ""
        expectInvalid(record, field: "activityId")
        record.activityId = "pts:com.example.fooddelivery:device:DeliveryAttributes"
        expectInvalid(record, field: "activityId")
        record.activityId = "order-43"
        expectValid(record)
    }

    @Test func pushToStartTokenNeedsDeviceIdButNoActivityId() {
        var record = Examples.tokenRecordPushToStart
        record.deviceId = nil
        expectInvalid(record, field: "deviceId")
        record.deviceId = ""
        expectInvalid(record, field: "deviceId")
        record.deviceId = "another-device"
        expectValid(record)
        #expect(record.activityId == nil)
    }

    @Test func widgetTokenBelongsToADeviceAndAKind() {
        var record = Examples.tokenRecordWidget
        expectValid(record)
        #expect(record.key == "wgt:com.example.fooddelivery:\(Examples.deviceId):OrderStatusWidget")
        record.activityId = "order-42"
        expectInvalid(record, field: "activityId")
        record.activityId = nil
        record.deviceId = "a:b"
        expectInvalid(record, field: "deviceId")
        record.deviceId = Examples.deviceId
        record.attributesType = "Order:Widget"
        expectInvalid(record, field: "attributesType")
        record.attributesType = ""
        expectInvalid(record, field: "attributesType")
    }

    @Test func channelStartIsAPushToStartNamingABase64Channel() {
        expectValid(Examples.pushRequestChannelStart)
        expectValid(Examples.pushOutcomeChannelStart)
        var request = Examples.pushRequestChannelStart
        request.event = .update
        expectInvalid(request, field: "channelId")
        request = Examples.pushRequestChannelStart
        request.pushToStartKey = nil
        request.activityId = "match-7"
        expectInvalid(request, field: "channelId")
        request = Examples.pushRequestChannelStart
        request.channelId = "not base64!"
        expectInvalid(request, field: "channelId")
        request.channelId = ""
        expectInvalid(request, field: "channelId")
    }

    @Test func widgetPushIsAPriority5ReloadToOneDevice() {
        expectValid(Examples.pushRequestWidget)
        var request = Examples.pushRequestWidget
        request.activityId = "order-42"
        expectInvalid(request, field: "widgetKey")
        request = Examples.pushRequestWidget
        request.priority = 10
        expectInvalid(request, field: "widgetKey")
        request = Examples.pushRequestWidget
        request.attributesType = "OtherWidget"
        expectInvalid(request, field: "widgetKey")
        request = Examples.pushRequestWidget
        request.app.bundleId = "com.example.other"
        expectInvalid(request, field: "widgetKey")
        request = Examples.pushRequestWidget
        request.payload = #"{"aps":{"content-changed":true,"alert":"x"}}"#
        expectInvalid(request, field: "payload")
        request = Examples.pushRequestWidget
        request.widgetKey = "wgt:broken"
        expectInvalid(request, field: "widgetKey")
        var outcome = Examples.pushOutcomeWidget
        expectValid(outcome)
        outcome.pushToStartKey = Examples.pushToStartKey
        expectInvalid(outcome, field: "widgetKey")
    }

    @Test(arguments: ["", "a", "abc", "ABCDEF", "0A1b", "zz", "ab cd", "0x1234", "ab\n", "ａｂ"])
    func tokenMustBeEvenLengthLowercaseHex(_ token: String) {
        var record = Examples.tokenRecord
        record.token = token
        expectInvalid(record, field: "token")
    }

    @Test(arguments: ["00", "0123456789abcdef", Examples.pushToStartToken])
    func lowercaseHexTokenIsValid(_ token: String) {
        var record = Examples.tokenRecord
        record.token = token
        expectValid(record)
    }

    @Test func tokenEnvironmentMustBeKnown() {
        var record = Examples.tokenRecord
        record.app.environment = APNsEnvironment(rawValue: "staging")
        expectInvalid(record, field: "app.environment")
        record.app.environment = .sandbox
        expectValid(record)
    }

    @Test func tokenStateMustBeKnown() {
        var record = Examples.tokenRecord
        record.state = TokenState(rawValue: "paused")
        expectInvalid(record, field: "state")
        record.state = .superseded
        expectValid(record)
    }

    @Test func invalidationIsPresentExactlyWhenInvalidated() {
        var record = Examples.tokenRecordInvalidated
        record.invalidation = nil
        expectInvalid(record, field: "invalidation")
        record.state = .superseded
        expectValid(record)
        record.invalidation = Examples.tokenRecordInvalidated.invalidation
        expectInvalid(record, field: "invalidation")
        record.state = .active
        expectInvalid(record, field: "invalidation")
        record.state = .invalidated
        expectValid(record)
    }

    // MARK: ActivityEvent

    @Test func eventKindAndUrgencyMustBeKnown() {
        var event = Examples.activityEvent
        event.kind = ActivityEventKind(rawValue: "pause")
        expectInvalid(event, field: "kind")
        event.kind = .end
        expectValid(event)
        event.urgency = Urgency(rawValue: "whenever")
        expectInvalid(event, field: "urgency")
        event.urgency = .critical
        expectValid(event)
    }

    @Test func eventActivityIdIsNonEmptyWithoutColon() {
        var event = Examples.activityEvent
        event.activityId = ""
        expectInvalid(event, field: "activityId")
        event.activityId = "orders:42"
        expectInvalid(event, field: "activityId")
        event.activityId = "orders-42_b.7"
        expectValid(event)
    }

    @Test func eventSequenceIsNotNegative() {
        var event = Examples.activityEvent
        event.sequence = -1
        expectInvalid(event, field: "sequence")
        event.sequence = 0
        expectValid(event)
        event.sequence = .max
        expectValid(event)
    }

    @Test(arguments: [ActivityEventKind.update, .end])
    func startTargetOnlyWithStart(_ kind: ActivityEventKind) {
        var event = Examples.activityEventPushToStart
        expectValid(event)
        event.kind = kind
        expectInvalid(event, field: "startTarget")
        event.startTarget = nil
        expectValid(event)
    }

    // MARK: PushRequest

    @Test func requestAddressesExactlyOneTarget() {
        var request = Examples.pushRequest
        request.pushToStartKey = Examples.pushToStartKey
        expectInvalid(request, field: "pushToStartKey")
        request.activityId = nil
        expectValid(request)
        request.pushToStartKey = nil
        expectInvalid(request, field: "activityId")
        request.pushToStartKey = ""
        expectInvalid(request, field: "pushToStartKey")
        request.pushToStartKey = nil
        request.activityId = ""
        expectInvalid(request, field: "activityId")
        request.activityId = "order-42"
        expectValid(request)
    }

    @Test(arguments: [0, 1, 4, 6, 9, 11, -10])
    func priorityOtherThan5Or10IsInvalid(_ priority: Int) {
        var request = Examples.pushRequest
        request.priority = priority
        expectInvalid(request, field: "priority")
    }

    @Test(arguments: [5, 10])
    func priority5Or10IsValid(_ priority: Int) {
        var request = Examples.pushRequest
        request.priority = priority
        expectValid(request)
    }

    @Test func payloadIsNonEmptyAndAtMost4096Bytes() {
        #expect(PushRequest.maximumPayloadBytes == 4096)
        var request = Examples.pushRequest
        request.payload = ""
        expectInvalid(request, field: "payload")
        request.payload = String(repeating: "x", count: 4096)
        expectValid(request)
        request.payload = String(repeating: "x", count: 4097)
        expectInvalid(request, field: "payload")
        // Bytes, not characters: 4095 + a 2-byte "é" is 4096 characters but 4097 bytes.
        request.payload = String(repeating: "x", count: 4095) + "é"
        #expect(request.payload.count == 4096)
        expectInvalid(request, field: "payload")
        request.payload = String(repeating: "x", count: 4094) + "é"
        expectValid(request)
    }

    @Test func requestEventMustBeKnown() {
        var request = Examples.pushRequest
        request.event = ActivityEventKind(rawValue: "refresh")
        expectInvalid(request, field: "event")
        request.event = .end
        expectValid(request)
    }

    @Test func requestEnvironmentMustBeKnown() {
        var request = Examples.pushRequest
        request.app.environment = APNsEnvironment(rawValue: "development")
        expectInvalid(request, field: "app.environment")
        request.app.environment = .sandbox
        expectValid(request)
    }

    @Test func requestIdIsAUUID() {
        var request = Examples.pushRequest
        request.requestId = "order-42-5"
        expectInvalid(request, field: "requestId")
        request.requestId = "6f2d8e4a-3b1c-4d5e-9f0a-1b2c3d4e5f60"
        expectValid(request)
    }

    // MARK: PushOutcome

    @Test func outcomeResultMustBeKnown() {
        var outcome = Examples.pushOutcome
        outcome.result = PushResult(rawValue: "queued")
        expectInvalid(outcome, field: "result")
        outcome.result = .deliveredDowngraded
        expectValid(outcome)
    }

    @Test func outcomeAddressesExactlyOneTarget() {
        var outcome = Examples.pushOutcome
        outcome.pushToStartKey = Examples.pushToStartKey
        expectInvalid(outcome, field: "pushToStartKey")
        outcome.activityId = nil
        expectValid(outcome)
        outcome.pushToStartKey = nil
        expectInvalid(outcome, field: "activityId")
    }

    @Test func outcomeAttemptsAreNotNegative() {
        var outcome = Examples.pushOutcome
        outcome.attempts = -1
        expectInvalid(outcome, field: "attempts")
        outcome.attempts = 0
        expectValid(outcome)
    }

    // MARK: Clicks

    @Test func clickNeedsActivityId() {
        var click = Examples.clickEvent
        click.activityId = ""
        expectInvalid(click, field: "activityId")
        click.activityId = "ride-7f3a9c"
        expectValid(click)
    }

    @Test func rejectedClickHasNoRules() {
        var rejected = Examples.rejectedClick
        rejected.reason = ClickRejectionReason(rawValue: "rateLimited")
        rejected.url = ""
        expectValid(rejected)
    }
}

@Suite("RejectedClick URL")
struct RejectedClickURLTests {
    private func rejected(url: String) -> RejectedClick {
        RejectedClick(reason: .malformedUrl, detail: "test", url: url, receivedAt: utc(2026, 11, 22, 10, 0, 0))
    }

    @Test func shortURLIsKept() {
        #expect(RejectedClick.maximumUrlBytes == 2048)
        let url = String(repeating: "a", count: 2048)
        #expect(rejected(url: url).url == url)
        #expect(rejected(url: Examples.rejectedClick.url).url == Examples.rejectedClick.url)
    }

    @Test func longURLIsCutTo2048Bytes() {
        let url = "fooddelivery://x?" + String(repeating: "p", count: 5000)
        let kept = rejected(url: url).url
        #expect(kept.utf8.count == 2048)
        #expect(url.hasPrefix(kept))
    }

    @Test func cutFallsOnACharacterBoundary() {
        // "é" is 2 bytes: at byte 2047 it would not fit whole.
        let accent = String(repeating: "a", count: 2047) + "é" + "tail"
        #expect(rejected(url: accent).url == String(repeating: "a", count: 2047))
        // A family emoji is one character of 18 bytes (several scalars): never split.
        let family = "👩‍👩‍👧"
        #expect(family.count == 1 && family.utf8.count == 18)
        let emoji = String(repeating: "a", count: 2040) + family + "b"
        #expect(rejected(url: emoji).url == String(repeating: "a", count: 2040))
        let fits = String(repeating: "a", count: 2030) + family + "b"
        #expect(rejected(url: fits).url == String(repeating: "a", count: 2030) + family)
    }

    @Test func decodingKeepsTheURLAsWritten() throws {
        let long = String(repeating: "u", count: 3000)
        let json = try Golden.json("RejectedClick").setting("url", to: .string(long))
        #expect(try IsletJSON.decode(RejectedClick.self, from: GoldenCase.bytes(json)).url == long)
    }
}

@Suite("DeadLetterRecord")
struct DeadLetterRecordTests {
    @Test func originalValueRoundTripsThroughBase64() throws {
        let record = Examples.deadLetterRecord
        #expect(record.originalValue == Examples.deadLetteredValue)
        let decoded = try IsletJSON.decode(DeadLetterRecord.self, from: Array(Golden.text("DeadLetterRecord").utf8))
        #expect(decoded.originalValue == Examples.deadLetteredValue)
        // The golden's dead-lettered event really is one without urgency.
        let error = decodingError { () throws(MessageDecodingError) in
            try IsletJSON.decode(ActivityEvent.self, from: decoded.originalValue ?? [])
        }
        #expect(error?.description == record.detail)
    }

    @Test func tombstoneHasNoValue() {
        var record = Examples.deadLetterRecord
        record = DeadLetterRecord(
            reason: .invalid, detail: "tombstone on a delete topic", origin: record.origin, originalKey: "order-42", originalValue: nil,
            service: "content-service", deadLetteredAt: record.deadLetteredAt)
        #expect(record.originalValueBase64 == nil)
        #expect(record.originalValue == nil)
        #expect(record.originalValueSize == nil)
        #expect(!record.originalValueTruncated)
    }

    @Test func hugeValuesAreTruncatedSoTheDeadLetterFits() throws {
        let huge = [UInt8](repeating: 0x7B, count: DeadLetterRecord.maximumKeptValueBytes + 10)
        let record = DeadLetterRecord(
            reason: .undecodable, detail: "not JSON", origin: Examples.deadLetterRecord.origin, originalKey: "k", originalValue: huge,
            service: "s", deadLetteredAt: Examples.deadLetterRecord.deadLetteredAt)
        #expect(record.originalValueTruncated)
        #expect(record.originalValueSize == huge.count)
        #expect(record.originalValue == Array(huge.prefix(DeadLetterRecord.maximumKeptValueBytes)))
        #expect(try IsletJSON.encode(record).count < 1_000_000)
        let exact = DeadLetterRecord(
            reason: .undecodable, detail: "not JSON", origin: Examples.deadLetterRecord.origin, originalKey: "k",
            originalValue: Array(huge.prefix(DeadLetterRecord.maximumKeptValueBytes)), service: "s",
            deadLetteredAt: Examples.deadLetterRecord.deadLetteredAt)
        #expect(!exact.originalValueTruncated)
    }
}
