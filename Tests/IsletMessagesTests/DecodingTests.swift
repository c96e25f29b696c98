import Foundation
import IsletMessages
import Testing

/// A reader must accept what a newer writer may add, and refuse, with an error naming the field,
/// what it cannot read.
@Suite("Tolerant decoding")
struct ToleranceTests {
    @Test("unknown fields are ignored, at the top level and nested", arguments: GoldenCase.all)
    func unknownFieldsAreIgnored(_ golden: GoldenCase) throws {
        var json = try golden.json
        let objects = [""] + json.memberPaths(freeForm: golden.schema.freeForm).filter {
            !golden.schema.freeForm.contains($0) && json.value(at: $0)?.objectValue != nil
        }
        for object in objects {
            json = json.setting(object.isEmpty ? "addedLater" : "\(object).addedLater", to: .object(["nested": .array([.integer(1)])]))
        }
        #expect(golden.isExpected(try golden.decode(json)), "with added fields in \(objects)")
    }

    /// Removing an optional field, or setting it to `null`, decodes as `nil`: the value re-encodes
    /// to the JSON without that field.
    @Test("missing or null optional fields decode as nil", arguments: GoldenCase.all)
    func optionalFieldsMayBeMissingOrNull(_ golden: GoldenCase) throws {
        let json = try golden.json
        let optional = json.memberPaths(freeForm: golden.schema.freeForm).filter { !golden.schema.required.contains($0) }
        for path in optional {
            let without = json.removing(path)
            for variant in [without, json.setting(path, to: .null)] {
                let decoded = try golden.decode(variant)
                let reencoded = try IsletJSON.decodeValue(JSONValue.self, from: IsletJSON.encode(decoded))
                #expect(reencoded == without, "\(path)")
            }
        }
    }

    @Test func optionalFieldsAreSeenAcrossTheGoldens() throws {
        // Each type's goldens together contain every field, so the tests above reach all of them.
        let expected: [String: Set<String>] = [
            "TokenRecord": [
                "activityId", "deviceId", "invalidation", "invalidation.apnsTimestamp", "invalidation.everyDevice", "invalidation.startActivityId", "activityStartedAt", "ownerVerified",
                "locale", "deviceKeyed",
            ],
            "ActivityEvent": [
                "startTarget", "attributes", "source", "bundleId", "presentation", "presentation.dismissal", "presentation.relevanceScore",
                "presentation.staleAfterSeconds", "presentation.sound", "presentation.alert", "presentation.alert.title", "presentation.alert.body",
                "presentation.alert.titleLocKey", "presentation.alert.titleLocArgs", "presentation.alert.bodyLocKey", "presentation.alert.bodyLocArgs",
                "presentation.alert.translations", "at", "startTarget.deviceId", "startTarget.userId",
            ],
            "PushRequest": [
                "activityId", "pushToStartKey", "staleDate", "expiration", "sourceEventId", "sourceActivityId", "state", "channelStoragePolicy",
                "tokenRegisteredAt", "deviceId", "startGroup", "widgetKey", "channelId",
            ],
            "PushOutcome": [
                "activityId", "pushToStartKey", "apns", "apns.reason", "apns.apnsId", "apns.timestamp", "apns.uniqueId", "priorityUsed", "latencyMilliseconds",
                "tokenFingerprint", "supersededBy", "detail", "bundleId", "attributesType", "channelId", "contentSequence", "announcementId",
                "deviceId", "apnsTimestamp", "startActivityId", "widgetKey",
            ],
            "ContentMemoryRecord": [
                "activity", "checkpoint", "activity.steps", "activity.lastSequence", "activity.lastTimestamp", "activity.lastState", "activity.alertTimes",
                "activity.startedAt", "activity.latest", "activity.payloadStoredAt", "activity.payloadLost", "activity.outcomes", "activity.outcomePositions", "activity.startedWith",
                "activity.contentRequestId", "activity.lastResendAt", "activity.goneAt", "activity.goneToken", "activity.inlinedImages",
                "activity.pendingImages", "activity.latest.staleDate", "activity.latest.pushToStartKey", "activity.latest.userStart", "activity.startWatch", "activity.startWatch.tokenFingerprint", "activity.startWatch.reportedAt", "activity.channelId",
            ],
            "DispatchBudgetRecord": ["activityId", "deviceId", "waitingSince", "activityDeviceId"],
            "BroadcastChannelRecord": ["endedAt", "deleteAt", "deletedAt"],
            "ClickEvent": ["app"],
            "RejectedClick": ["tappedAt", "appVersion", "osVersion", "clientId"],
            "DeadLetterRecord": ["origin.timestamp", "originalKey", "originalValueBase64", "originalValueSize"],
        ]
        for schema in MessageSchema.all {
            var seen = Set<String>()
            for golden in schema.goldens {
                seen.formUnion(try golden.json.memberPaths(freeForm: schema.freeForm))
            }
            #expect(seen.subtracting(schema.required) == expected[schema.typeName], "\(schema.typeName)")
            #expect(schema.required.isSubset(of: seen), "\(schema.typeName): required fields no golden has")
        }
    }

    /// An enum value this reader does not know still decodes and survives re-encoding; `validate()`
    /// rejects it, naming the field, exactly where the reader has to act on the value.
    @Test("unknown enum values decode; validate() names the field", arguments: GoldenCase.all)
    func unknownEnumValues(_ golden: GoldenCase) throws {
        let json = try golden.json
        for (path, validated) in golden.schema.enums.sorted(by: { $0.key < $1.key }) where json.value(at: path) != nil {
            let changed = json.setting(path, to: .string("introducedLater"))
            let decoded = try golden.decode(changed)
            let reencoded = try IsletJSON.decodeValue(JSONValue.self, from: IsletJSON.encode(decoded))
            #expect(reencoded == changed, "\(path)")
            if validated {
                let error = validationError(decoded)
                #expect(error?.field == path)
                #expect(error?.problem.contains("introducedLater") == true)
            } else {
                #expect(throws: Never.self, "\(path) is informational") { try decoded.validate() }
            }
        }
    }

    @Test func unknownEnumValueIsKeptAndNotKnown() throws {
        let json = try Golden.json("TokenRecord").setting("state", to: .string("quarantined"))
        let record = try IsletJSON.decode(TokenRecord.self, from: GoldenCase.bytes(json))
        #expect(record.state.rawValue == "quarantined")
        #expect(!record.state.isKnown)
        #expect(record.kind.isKnown)
        #expect(record.state != .active && record.state != .superseded && record.state != .invalidated)
    }

    @Test func everyEnumListsItsValuesOnce() {
        func check<E: OpenEnum>(_ type: E.Type, _ expected: [String]) {
            #expect(E.knownValues.map(\.rawValue) == expected, "\(E.self)")
            #expect(E.knownValues.allSatisfy { $0.isKnown })
            #expect(!E(rawValue: "somethingElse").isKnown)
        }
        check(TokenKind.self, ["update", "pushToStart", "widget"])
        check(TokenState.self, ["active", "superseded", "invalidated"])
        check(
            InvalidationReason.self,
            [
                "clientEnded", "userDismissed", "ineligible", "apnsUnregistered", "apnsExpiredToken", "apnsBadDeviceToken",
                "apnsDeviceTokenNotForTopic", "severelyStale", "lifetimeExceeded", "backendEnded", "claimedByOwner",
                "startUnconfirmed",
            ])
        check(APNsEnvironment.self, ["production", "sandbox"])
        check(ActivityEventKind.self, ["start", "update", "end"])
        check(Urgency.self, ["routine", "important", "critical"])
        check(PushResult.self, ["delivered", "deliveredDowngraded", "coalesced", "tokenInvalid", "awaitingToken", "rejected", "expired", "failed", "sending", "retrying", "startUnconfirmed"])
        check(Surface.self, ["lockScreen", "islandExpanded", "compactLeading", "compactTrailing", "minimal"])
        check(
            ClickRejectionReason.self,
            [
                "badSignature", "unknownKeyId", "expired", "malformedUrl", "missingParameter", "duplicateParameter",
                "invalidParameter", "duplicateTap",
            ])
        check(DeadLetterRecord.Reason.self, ["undecodable", "unsupportedSchemaVersion", "invalid", "unprocessable"])
    }
}

@Suite("Decoding errors")
struct DecodingErrorTests {
    /// Each field the schema calls required, removed or `null`, gives `.missingField` with its
    /// dotted path; every other field may go.
    @Test("a missing or null required field is named", arguments: GoldenCase.all)
    func missingRequiredField(_ golden: GoldenCase) throws {
        let json = try golden.json
        let required = json.memberPaths(freeForm: golden.schema.freeForm).filter(golden.schema.required.contains)
        #expect(!required.isEmpty)
        for path in required {
            for variant in [json.removing(path), json.setting(path, to: .null)] {
                let error = decodingError { () throws(MessageDecodingError) in try golden.decode(variant) }
                #expect(error?.kind == .missingField, "\(path)")
                #expect(error?.path == path)
                #expect(error?.messageType == golden.schema.typeName)
                #expect(error?.description.contains(path) == true)
            }
        }
    }

    struct Change: Sendable, CustomTestStringConvertible {
        let golden: String
        let path: String
        let value: JSONValue
        var testDescription: String { "\(golden) \(path) = \(value)" }
        init(_ golden: String, _ path: String, _ value: JSONValue) {
            self.golden = golden
            self.path = path
            self.value = value
        }

        func decode() throws -> MessageDecodingError? {
            let case_ = try #require(GoldenCase.all.first { $0.name == golden })
            let json = try case_.json
            try #require(json.value(at: path) != nil, "the golden has \(path)")
            return decodingError { () throws(MessageDecodingError) in try case_.decode(json.setting(path, to: value)) }
        }
    }

    @Test(
        "a value of the wrong JSON type is named",
        arguments: [
            Change("TokenRecord", "schemaVersion", .string("1")),
            Change("TokenRecord", "kind", .integer(1)),
            Change("TokenRecord", "app", .string("com.example.fooddelivery")),
            Change("TokenRecord", "app.bundleId", .integer(42)),
            Change("TokenRecord", "frequentUpdatesEnabled", .string("yes")),
            Change("TokenRecord", "frequentUpdatesEnabled", .integer(1)),
            Change("TokenRecord", "registeredAt", .integer(1_795_341_732)),
            Change("TokenRecord", "activityId", .bool(true)),
            Change("TokenRecord.invalidated", "invalidation.invalidatedAt", .bool(true)),
            Change("ActivityEvent", "sequence", .string("5")),
            Change("ActivityEvent", "fields", .array([.string("status")])),
            Change("ActivityEvent.pushToStart", "startTarget.deviceId", .integer(7)),
            Change("ActivityEvent.pushToStart", "attributes", .string("orderId=42")),
            Change("ActivityEvent.localizedAlert", "presentation.alert.titleLocArgs", .string("Tim")),
            Change("ActivityEvent.localizedAlert", "presentation.alert.bodyLocKey", .integer(1)),
            Change("ActivityEvent.localizedAlert", "presentation.alert.translations", .array([])),
            Change("PushRequest", "priority", .string("10")),
            Change("PushRequest", "payload", .object(["aps": .object([:])])),
            Change("PushRequest", "supersedable", .integer(1)),
            Change("PushOutcome", "apns.status", .string("200")),
            Change("PushOutcome", "latencyMilliseconds", .string("187.6 ms")),
            Change("ClickEvent", "contentSequence", .bool(false)),
            Change("ClickEvent", "app.environment", .integer(1)),
            Change("RejectedClick", "url", .array([])),
            Change("DeadLetterRecord", "origin.partition", .string("17")),
        ])
    func wrongType(_ change: Change) throws {
        let error = try change.decode()
        #expect(error?.kind == .wrongType)
        #expect(error?.path == change.path)
    }

    @Test(
        "a date that cannot be read is an invalid value",
        arguments: [
            Change("ActivityEvent", "occurredAt", .string("yesterday")),
            Change("TokenRecord", "registeredAt", .string("2026-11-22 10:15:30")),
            Change("TokenRecord", "updatedAt", .string("2026-11-22T10:15:30.123")),
            Change("TokenRecord.invalidated", "invalidation.invalidatedAt", .string("2026-13-40T10:15:30.000Z")),
            Change("PushOutcome.tokenInvalid", "apns.timestamp", .string("1795342530")),
            Change("ClickEvent", "tappedAt", .string("")),
            Change("DeadLetterRecord", "origin.timestamp", .string("2026-11-22")),
        ])
    func invalidDate(_ change: Change) throws {
        let error = try change.decode()
        #expect(error?.kind == .invalidValue)
        #expect(error?.path == change.path)
        #expect(error?.message.contains("ISO 8601") == true)
    }

    static let malformedInputs: [(String, [UInt8])] = [
        ("empty", []),
        ("garbage bytes", [0x00, 0xff, 0x13, 0x37]),
        ("not JSON", Array("schemaVersion=1&kind=update".utf8)),
        ("truncated", Array(#"{"schemaVersion": 1, "kind": "upd"#.utf8)),
        ("missing comma", Array(#"{"schemaVersion": 1 "kind": "update"}"#.utf8)),
        ("unquoted key", Array(#"{schemaVersion: 1}"#.utf8)),
        ("two documents", Array(#"{"schemaVersion": 1} {"schemaVersion": 1}"#.utf8)),
        // Invalid UTF-8 in the first field the decoder reads, and in one it would never read.
        ("invalid UTF-8 in a read string", Array(#"{"schemaVersion": 1, "kind": "upd"#.utf8) + [0xc3, 0x28] + Array(#""}"#.utf8)),
        ("invalid UTF-8 in an unknown field", Array(#"{"schemaVersion": 1, "x": ""#.utf8) + [0xff] + Array(#""}"#.utf8)),
        ("UTF-16", Array(#"{"schemaVersion": 1}"#.data(using: .utf16BigEndian)!)),
        ("NUL byte", Array(#"{"schemaVersion": 1}"#.utf8) + [0]),
    ]

    @Test("bytes that are not UTF-8 JSON are malformed", arguments: malformedInputs)
    func malformed(_ name: String, _ bytes: [UInt8]) {
        for golden in GoldenCase.main {
            let error = decodingError { () throws(MessageDecodingError) in try golden.decode(bytes) }
            #expect(error?.kind == .malformedJSON, "\(golden.name) from \(name)")
            #expect(error?.path == "")
        }
    }

    @Test("a JSON value that is not an object is the wrong type")
    func notAnObject() {
        for text in ["[]", "42", #""TokenRecord""#, "null"] {
            let error = decodingError { () throws(MessageDecodingError) in try IsletJSON.decode(TokenRecord.self, from: Array(text.utf8)) }
            #expect(error?.kind == .wrongType || error?.kind == .missingField, "\(text)")
            #expect(error?.path == "")
        }
    }

    /// Foundation's decoder reports a fraction in an integer field without the field's path; the
    /// record is still refused.
    @Test func fractionInIntegerField() throws {
        let json = try Golden.json("PushOutcome").setting("attempts", to: .number(1.5))
        let error = decodingError { () throws(MessageDecodingError) in try IsletJSON.decode(PushOutcome.self, from: GoldenCase.bytes(json)) }
        #expect(error != nil)
    }

    @Test("a schema version this reader does not know is refused", arguments: [2, 0, -1, 99])
    func unsupportedSchemaVersion(_ version: Int) throws {
        for golden in GoldenCase.main {
            let json = try golden.json.setting("schemaVersion", to: .integer(Int64(version)))
            let error = decodingError { () throws(MessageDecodingError) in try golden.decode(json) }
            #expect(error?.kind == .unsupportedSchemaVersion(version), "\(golden.name)")
            #expect(error?.path == "schemaVersion")
        }
    }

    /// A newer writer may have dropped or retyped a field: the version, not the symptom, is reported.
    @Test func newerVersionWinsOverAMissingField() throws {
        for golden in GoldenCase.main {
            let json = try golden.json
            let required = json.memberPaths(freeForm: golden.schema.freeForm).filter {
                golden.schema.required.contains($0) && $0 != "schemaVersion"
            }
            for path in required {
                let newer = json.setting("schemaVersion", to: .integer(2)).removing(path)
                let error = decodingError { () throws(MessageDecodingError) in try golden.decode(newer) }
                #expect(error?.kind == .unsupportedSchemaVersion(2), "\(golden.name) without \(path)")
            }
            let current = json.removing(required[0])
            let error = decodingError { () throws(MessageDecodingError) in try golden.decode(current) }
            #expect(error?.kind == .missingField)
        }
    }

    @Test func missingSchemaVersionIsAMissingField() throws {
        let json = try Golden.json("ClickEvent").removing("schemaVersion")
        let error = decodingError { () throws(MessageDecodingError) in try IsletJSON.decode(ClickEvent.self, from: GoldenCase.bytes(json)) }
        #expect(error?.kind == .missingField)
        #expect(error?.path == "schemaVersion")
    }
}
