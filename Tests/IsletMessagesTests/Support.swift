import Foundation
import IsletMessages
import Testing

/// One golden file and the value it holds.
struct GoldenCase: Sendable, CustomTestStringConvertible {
    /// The file name without `.json`, e.g. `TokenRecord.pushToStart`.
    let name: String
    let expected: any IsletMessage
    let schema: MessageSchema

    init<Message: IsletMessage>(_ name: String, _ expected: Message) {
        self.name = name
        self.expected = expected
        self.schema = MessageSchema.of(Message.self)
    }

    var testDescription: String { name }

    var text: String {
        get throws { try Golden.text(name) }
    }

    var json: JSONValue {
        get throws { try Golden.json(name) }
    }

    /// Decodes bytes as this case's message type.
    func decode(_ bytes: [UInt8]) throws(MessageDecodingError) -> any IsletMessage {
        try Self.decode(bytes, like: expected)
    }

    func decode(_ json: JSONValue) throws(MessageDecodingError) -> any IsletMessage {
        try decode(Self.bytes(json))
    }

    func isExpected(_ message: any IsletMessage) -> Bool {
        Self.equal(expected, message)
    }

    static func bytes(_ json: JSONValue) -> [UInt8] {
        // Encoding a JSONValue cannot fail.
        try! IsletJSON.encode(json)
    }

    private static func decode<Message: IsletMessage>(_ bytes: [UInt8], like _: Message) throws(MessageDecodingError) -> any IsletMessage {
        try IsletJSON.decode(Message.self, from: bytes)
    }

    private static func equal<Message: IsletMessage>(_ expected: Message, _ other: any IsletMessage) -> Bool {
        (other as? Message) == expected
    }

    /// Every golden file, with its value.
    static let all: [GoldenCase] = [
        GoldenCase("TokenRecord", Examples.tokenRecord),
        GoldenCase("TokenRecord.pushToStart", Examples.tokenRecordPushToStart),
        GoldenCase("TokenRecord.invalidated", Examples.tokenRecordInvalidated),
        GoldenCase("TokenRecord.minimal", Examples.tokenRecordMinimal),
        GoldenCase("TokenRecord.device", Examples.tokenRecordDevice),
        GoldenCase("TokenRecord.endedEverywhere", Examples.tokenRecordEndedEverywhere),
        GoldenCase("TokenRecord.startUnconfirmed", Examples.tokenRecordStartUnconfirmed),
        GoldenCase("TokenRecord.widget", Examples.tokenRecordWidget),
        GoldenCase("PushRequest.widget", Examples.pushRequestWidget),
        GoldenCase("PushOutcome.widget", Examples.pushOutcomeWidget),
        GoldenCase("PushRequest.channelStart", Examples.pushRequestChannelStart),
        GoldenCase("PushOutcome.channelStart", Examples.pushOutcomeChannelStart),
        GoldenCase("ContentMemoryRecord.channel", Examples.contentMemoryRecordChannel),
        GoldenCase("ActivityEvent", Examples.activityEvent),
        GoldenCase("ActivityEvent.pushToStart", Examples.activityEventPushToStart),
        GoldenCase("ActivityEvent.userStart", Examples.activityEventUserStart),
        GoldenCase("ActivityEvent.minimal", Examples.activityEventMinimal),
        GoldenCase("ActivityEvent.presentation", Examples.activityEventPresented),
        GoldenCase("ActivityEvent.scheduled", Examples.activityEventScheduled),
        GoldenCase("ActivityEvent.localizedAlert", Examples.activityEventLocalizedAlert),
        GoldenCase("PushRequest", Examples.pushRequest),
        GoldenCase("PushRequest.pushToStart", Examples.pushRequestPushToStart),
        GoldenCase("PushRequest.broadcast", Examples.pushRequestBroadcast),
        GoldenCase("PushRequest.deviceCopy", Examples.pushRequestDeviceCopy),
        GoldenCase("PushRequest.userStart", Examples.pushRequestUserStart),
        GoldenCase("PushOutcome", Examples.pushOutcome),
        GoldenCase("PushOutcome.tokenInvalid", Examples.pushOutcomeTokenInvalid),
        GoldenCase("PushOutcome.pushToStart", Examples.pushOutcomePushToStart),
        GoldenCase("PushOutcome.sending", Examples.pushOutcomeSending),
        GoldenCase("PushOutcome.coalesced", Examples.pushOutcomeCoalesced),
        GoldenCase("PushOutcome.minimal", Examples.pushOutcomeMinimal),
        GoldenCase("PushOutcome.deviceCopy", Examples.pushOutcomeDeviceCopy),
        GoldenCase("PushOutcome.broadcast", Examples.pushOutcomeBroadcast),
        GoldenCase("ContentMemoryRecord", Examples.contentMemoryRecord),
        GoldenCase("ContentMemoryRecord.gone", Examples.contentMemoryRecordGone),
        GoldenCase("ContentMemoryRecord.pushToStart", Examples.contentMemoryRecordPushToStart),
        GoldenCase("ContentMemoryRecord.userStart", Examples.contentMemoryRecordUserStart),
        GoldenCase("ContentMemoryRecord.startWatch", Examples.contentMemoryRecordStartWatch),
        GoldenCase("PushOutcome.startUnconfirmed", Examples.pushOutcomeStartUnconfirmed),
        GoldenCase("ContentMemoryRecord.checkpoint", Examples.contentMemoryCheckpoint),
        GoldenCase("ContentMemoryRecord.steps", Examples.contentMemorySteps),
        GoldenCase("DispatchBudgetRecord", Examples.dispatchBudgetRecord),
        GoldenCase("DispatchBudgetRecord.pushToStart", Examples.dispatchBudgetRecordPushToStart),
        GoldenCase("DispatchBudgetRecord.device", Examples.dispatchBudgetRecordDevice),
        GoldenCase("BroadcastChannelRecord", Examples.broadcastChannelRecord),
        GoldenCase("BroadcastChannelRecord.deleted", Examples.broadcastChannelRecordDeleted),
        GoldenCase("ClickEvent", Examples.clickEvent),
        GoldenCase("RejectedClick", Examples.rejectedClick),
        GoldenCase("DeadLetterRecord", Examples.deadLetterRecord),
    ]

    /// The main golden of each message type (`<TypeName>.json`).
    static var main: [GoldenCase] { all.filter { $0.name == $0.schema.typeName } }
}

/// What the tests know about each message type's JSON shape, written out by hand so that the
/// decoder is checked against it (not derived from the decoder).
struct MessageSchema: Sendable {
    let typeName: String
    let topic: IsletTopic
    /// Fields a decoder must refuse to do without, as dotted paths; a nested one counts only
    /// when its parent object is present.
    let required: Set<String>
    /// Fields holding someone else's JSON (their members are not part of the schema).
    let freeForm: Set<String>
    /// Open-enum fields, and whether `validate()` rejects a value it does not know.
    let enums: [String: Bool]

    static let all: [MessageSchema] = [
        MessageSchema(
            typeName: "TokenRecord", topic: IsletTopics.tokens,
            required: [
                "schemaVersion", "kind", "userId", "token", "app", "app.bundleId", "app.environment", "attributesType",
                "frequentUpdatesEnabled", "appVersion", "state", "invalidation.reason", "invalidation.invalidatedAt",
                "registeredAt", "updatedAt",
            ],
            freeForm: [],
            enums: ["kind": true, "app.environment": true, "state": true, "invalidation.reason": false]),
        MessageSchema(
            typeName: "ActivityEvent", topic: IsletTopics.activityEvents,
            required: [
                "schemaVersion", "eventId", "activityId", "kind", "attributesType", "fields", "urgency", "occurredAt", "sequence",
                "startTarget.app", "startTarget.app.bundleId", "startTarget.app.environment",
            ],
            // An alert's translations are keyed by language tag: a map, not members of the schema.
            freeForm: ["fields", "attributes", "presentation.alert.translations"],
            enums: ["kind": true, "urgency": true, "startTarget.app.environment": false]),
        MessageSchema(
            typeName: "PushRequest", topic: IsletTopics.pushRequests,
            required: [
                "schemaVersion", "requestId", "event", "app", "app.bundleId", "app.environment", "attributesType", "payload",
                "priority", "urgency", "supersedable", "alerting", "apnsTimestamp", "contentSequence", "createdAt",
            ],
            freeForm: [],
            enums: ["event": true, "app.environment": true, "urgency": false]),
        MessageSchema(
            typeName: "PushOutcome", topic: IsletTopics.pushOutcomes,
            required: ["schemaVersion", "requestId", "result", "apns.status", "attempts", "completedAt"],
            freeForm: [],
            enums: ["result": true]),
        MessageSchema(
            typeName: "ContentMemoryRecord", topic: IsletTopics.contentMemory,
            required: [
                "schemaVersion", "writtenAt", "activity.bundleId", "activity.activityId", "activity.partition", "activity.ended",
                "activity.resends", "activity.gone", "activity.payloadStoredAt.partition", "activity.payloadStoredAt.offset",
                "activity.latest.requestId", "activity.latest.event", "activity.latest.app", "activity.latest.app.bundleId",
                "activity.latest.app.environment", "activity.latest.attributesType", "activity.latest.createdAt",
                "activity.latest.contentSequence", "activity.latest.content",
                "activity.startWatch.requestId", "activity.startWatch.pushToStartKey", "activity.startWatch.deliveredAt",
                "checkpoint.partition", "checkpoint.positions",
            ],
            freeForm: [],
            enums: [:]),
        MessageSchema(
            typeName: "DispatchBudgetRecord", topic: IsletTopics.dispatchBudgets,
            required: ["schemaVersion", "bundleId", "partition", "available", "capacity", "periodSeconds", "updatedAt", "writtenAt"],
            freeForm: [],
            enums: [:]),
        MessageSchema(
            typeName: "BroadcastChannelRecord", topic: IsletTopics.broadcastChannels,
            required: ["schemaVersion", "app", "app.bundleId", "app.environment", "activityId", "channelId", "storagePolicy", "createdAt", "writtenAt"],
            freeForm: [],
            enums: ["app.environment": true]),
        MessageSchema(
            typeName: "ClickEvent", topic: IsletTopics.clicks,
            required: [
                "schemaVersion", "clickId", "activityId", "attributesType", "surface", "element", "contentSequence",
                "app.bundleId", "app.environment", "appVersion", "osVersion", "keyId", "issuedAt", "tappedAt", "receivedAt",
            ],
            freeForm: [],
            enums: ["surface": false, "app.environment": false]),
        MessageSchema(
            typeName: "RejectedClick", topic: IsletTopics.clicksRejected,
            required: ["schemaVersion", "reason", "detail", "url", "receivedAt"],
            freeForm: [],
            enums: ["reason": false]),
        MessageSchema(
            typeName: "DeadLetterRecord", topic: IsletTopics.deadLetters,
            required: [
                "schemaVersion", "reason", "detail", "origin", "origin.topic", "origin.partition", "origin.offset",
                "originalValueTruncated", "service", "deadLetteredAt",
            ],
            freeForm: [],
            enums: ["reason": false]),
    ]

    static func of<Message: IsletMessage>(_ type: Message.Type) -> MessageSchema {
        all.first { $0.typeName == "\(Message.self)" }!
    }

    static func named(_ typeName: String) -> MessageSchema? {
        all.first { $0.typeName == typeName }
    }

    /// The goldens of this type.
    var goldens: [GoldenCase] { GoldenCase.all.filter { $0.schema.typeName == typeName } }
}

/// The files in `Golden/`.
enum Golden {
    static var directory: URL {
        get throws { try #require(Bundle.module.url(forResource: "Golden", withExtension: nil)) }
    }

    static func text(_ name: String) throws -> String {
        try String(contentsOf: directory.appendingPathComponent("\(name).json"), encoding: .utf8)
    }

    static func json(_ name: String) throws -> JSONValue {
        try IsletJSON.decodeValue(JSONValue.self, from: Array(text(name).utf8))
    }

    /// The names of all golden files, without `.json`.
    static func names() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".json") }
            .map { String($0.dropLast(".json".count)) }
            .sorted()
    }
}

extension JSONValue {
    /// Every member of every object, as dotted paths, parents before children; free-form
    /// fields are listed but not entered.
    func memberPaths(freeForm: Set<String> = [], prefix: String = "") -> [String] {
        guard let members = objectValue else { return [] }
        return members.keys.sorted().flatMap { name -> [String] in
            let path = prefix.isEmpty ? name : "\(prefix).\(name)"
            if freeForm.contains(path) { return [path] }
            return [path] + members[name]!.memberPaths(freeForm: freeForm, prefix: path)
        }
    }

    /// The value at a dotted path.
    func value(at path: String) -> JSONValue? {
        path.split(separator: ".").reduce(Optional(self)) { value, name in value?[String(name)] }
    }

    /// A copy with the member at `path` set (`nil`: removed).
    func setting(_ path: String, to newValue: JSONValue?) -> JSONValue {
        setting(path.split(separator: ".").map(String.init)[...], to: newValue)
    }

    func removing(_ path: String) -> JSONValue {
        setting(path, to: nil)
    }

    private func setting(_ path: ArraySlice<String>, to newValue: JSONValue?) -> JSONValue {
        guard var members = objectValue, let name = path.first else { return self }
        if path.count == 1 {
            members[name] = newValue
        } else if let member = members[name] {
            members[name] = member.setting(path.dropFirst(), to: newValue)
        }
        return .object(members)
    }
}

/// Runs `body` and returns the decoding error it threw, recording an issue if it threw none.
func decodingError(
    _ body: () throws(MessageDecodingError) -> Any, sourceLocation: SourceLocation = #_sourceLocation
) -> MessageDecodingError? {
    do {
        let value = try body()
        Issue.record("expected a MessageDecodingError, decoded \(value)", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

/// Runs `body` and returns the validation error it threw, recording an issue if it threw none.
func validationError(
    _ message: any IsletMessage, sourceLocation: SourceLocation = #_sourceLocation
) -> MessageValidationError? {
    do {
        try message.validate()
        Issue.record("expected validate() to throw for \(message)", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}
