import Foundation
import IsletMessages
import Testing
@testable import ContentService

/// Per-event presentation (issue 60, item 3): an event may set its end's dismissal, its relevance,
/// its stale time, its alert's texts and sound, each checked against Apple's rules; absent, the
/// template's state and the policy decide as before.
@Suite("Per-event presentation: dismissal, relevance, stale time, alert texts and sound")
struct PresentationTests {
    func requests(_ event: ActivityEvent, locale: String? = nil, memory: inout ActivityMemory) throws -> [PushRequest] {
        try assembler().assemble(event, app: app, appVersion: AppVersion("3.0")!, locale: locale, memory: &memory, now: now).requests
    }

    static let arriving: [String: JSONValue] = ["status": .string("arriving"), "orderId": .string("42"), "courier": .object(["name": .string("Ana")])]

    @Test("each member refused by Apple's rules, naming it", arguments: [
        (ActivityEventKind.update, EventPresentation(dismissal: .immediate), "presentation.dismissal"),
        (.end, EventPresentation(dismissal: .at(now.addingTimeInterval(5 * 3_600))), "presentation.dismissal"),
        (.end, EventPresentation(dismissal: .at(now.addingTimeInterval(-60))), "presentation.dismissal"),
        (.update, EventPresentation(relevanceScore: 101), "presentation.relevanceScore"),
        (.update, EventPresentation(relevanceScore: .nan), "presentation.relevanceScore"),
        (.update, EventPresentation(staleAfterSeconds: 5), "presentation.staleAfterSeconds"),
        (.update, EventPresentation(sound: "../etc/passwd"), "presentation.sound"),
        (.update, EventPresentation(alert: .init(title: "")), "presentation.alert.title"),
        (.update, EventPresentation(alert: .init(title: "t", body: String(repeating: "b", count: 1_025))), "presentation.alert.body"),
        // A title, or a title's loc key: one, not both (which one was meant is not ours to guess).
        (.update, EventPresentation(alert: .init(body: "no title")), "presentation.alert.title"),
        (.update, EventPresentation(alert: .init(title: "t", titleLocKey: "T")), "presentation.alert.titleLocKey"),
        (.update, EventPresentation(alert: .init(title: "t", body: "b", bodyLocKey: "B")), "presentation.alert.bodyLocKey"),
        (.update, EventPresentation(alert: .init(titleLocKey: "")), "presentation.alert.titleLocKey"),
        (.update, EventPresentation(alert: .init(titleLocKey: String(repeating: "K", count: 257))), "presentation.alert.titleLocKey"),
        (.update, EventPresentation(alert: .init(title: "t", titleLocArgs: ["a"])), "presentation.alert.titleLocArgs"),
        (.update, EventPresentation(alert: .init(titleLocKey: "T", titleLocArgs: Array(repeating: "a", count: 17))), "presentation.alert.titleLocArgs"),
        (.update, EventPresentation(alert: .init(title: "t", bodyLocKey: "B", bodyLocArgs: [String(repeating: "a", count: 257)])), "presentation.alert.bodyLocArgs"),
        // 512 bytes of arguments per key at most: a key is never cut, and an argument not below 32 characters.
        (.update, EventPresentation(alert: .init(titleLocKey: "T", titleLocArgs: Array(repeating: String(repeating: "🚲", count: 43), count: 3))),
         "presentation.alert.titleLocArgs"),
        // A key that is no tag, long or unprintable, is not echoed back.
        (.update, EventPresentation(alert: .init(title: "t", translations: [String(repeating: "x", count: 400): .init(title: "嗨")])), "presentation.alert.translations"),
        (.update, EventPresentation(alert: .init(title: "t", translations: ["zh\nHans": .init(title: "嗨")])), "presentation.alert.translations"),
        // Translations: canonical tags (as a token's locale is registered), the same limits as the alert's own texts, at most 50.
        (.update, EventPresentation(alert: .init(title: "t", translations: ["zh-hans": .init(title: "嗨")])), "presentation.alert.translations.zh-hans"),
        (.update, EventPresentation(alert: .init(title: "t", translations: ["zh_Hans": .init(title: "嗨")])), "presentation.alert.translations.zh_Hans"),
        (.update, EventPresentation(alert: .init(title: "t", translations: ["chinese": .init(title: "嗨")])), "presentation.alert.translations.chinese"),
        (.update, EventPresentation(alert: .init(title: "t", translations: ["zh-Hans": .init(title: "")])), "presentation.alert.translations.zh-Hans.title"),
        (.update, EventPresentation(alert: .init(title: "t", translations: ["de": .init(title: "t", body: String(repeating: "b", count: 1_025))])),
         "presentation.alert.translations.de.body"),
        (.update, EventPresentation(alert: .init(title: "t", translations: Self.languages(51))), "presentation.alert.translations"),
    ])
    func refused(kind: ActivityEventKind, presentation: EventPresentation, field: String) {
        var made = event("DeliveryAttributes", kind, sequence: 1, Self.arriving)
        made.presentation = presentation
        let error = #expect(throws: MessageValidationError.self) { try made.validate() }
        #expect(error?.field == field)
    }

    /// `count` distinct canonical tags (`aa`, `ab`, …), each with a title.
    static func languages(_ count: Int) -> [String: EventPresentation.Alert.Translation] {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        return Dictionary(uniqueKeysWithValues: (0..<count).map { ("\(letters[$0 / 26])\(letters[$0 % 26])", .init(title: "t\($0)")) })
    }

    @Test("the limits allow what they name: 50 translations, 16 arguments of up to 256 bytes and 512 in all, keys of 256 bytes, a translation without a body")
    func withinLimits() throws {
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(alert: .init(
            titleLocKey: String(repeating: "K", count: 256), titleLocArgs: Array(repeating: String(repeating: "a", count: 32), count: 16),
            bodyLocKey: "B", bodyLocArgs: [String(repeating: "a", count: 256), String(repeating: "b", count: 256)],
            translations: Self.languages(50).merging(["zh-Hans-CN": .init(title: "嗨")]) { $1 }.filter { $0.key != "aa" }))
        try made.validate()
    }

    @Test("an alert at every limit, in 4-byte emoji, fits 4 KB once assembled: both keys whole, 1 KB of arguments cut as texts are")
    func largestAlertFits() throws {
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        let args = Array(repeating: String(repeating: "🚲", count: 8), count: 16)
        made.presentation = EventPresentation(alert: .init(
            titleLocKey: String(repeating: "T", count: 256), titleLocArgs: args, bodyLocKey: String(repeating: "B", count: 256), bodyLocArgs: args))
        try made.validate()
        var memory = ActivityMemory()
        let result = try assembler().assemble(made, app: app, appVersion: AppVersion("2.0")!, locale: nil, memory: &memory, now: now)
        #expect(result.requests[0].payload.utf8.count <= PushRequest.maximumPayloadBytes, "\(result.shrinks)")
        let alert = try #require(try aps(result.requests[0])["alert"])
        #expect(alert["title"]?["loc-key"] == .string(String(repeating: "T", count: 256)) && alert["body"]?["loc-key"] == .string(String(repeating: "B", count: 256)))
    }

    @Test("the presentation travels on the topic: written and read back the same, by the fast reader and by Codable")
    func wire() throws {
        var made = event("DeliveryAttributes", .end, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(
            dismissal: .at(Date(timeIntervalSince1970: 1_795_003_600)), relevanceScore: 77.5, staleAfterSeconds: 60, sound: "ding.caf",
            alert: .init(title: "Here", body: "At the door"))
        let bytes = try IsletJSON.encode(made)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: bytes) == made)
        #expect(try IsletJSON.decodeWithDecoder(ActivityEvent.self, from: bytes) == made)
        made.presentation = EventPresentation(dismissal: .immediate)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: try IsletJSON.encode(made)) == made)
        #expect(String(decoding: try IsletJSON.encode(made), as: UTF8.self).contains(#""dismissal":"immediate""#))
        // An alert by loc keys, with translations.
        made.presentation = EventPresentation(alert: .init(
            titleLocKey: "ARRIVED", titleLocArgs: ["Ana"], bodyLocKey: "DOOR", bodyLocArgs: ["4B", "2"],
            translations: ["zh-Hans": .init(title: "已到达", body: "4B 门"), "de": .init(title: "Angekommen")]))
        let localized = try IsletJSON.encode(made)
        #expect(try IsletJSON.decode(ActivityEvent.self, from: localized) == made)
        #expect(try IsletJSON.decodeWithDecoder(ActivityEvent.self, from: localized) == made)
        #expect(String(decoding: localized, as: UTF8.self).contains(#""translations":{"de":{"title":"Angekommen"},"zh-Hans":{"#))
        // What the fast reader cannot take is refused, as Codable refuses it.
        let text = String(decoding: localized, as: UTF8.self)
        for (part, broken) in [
            (#""titleLocArgs":["Ana"]"#, #""titleLocArgs":"Ana""#), (#""titleLocArgs":["Ana"]"#, #""titleLocArgs":[1]"#),
            (#""de":{"title":"Angekommen"}"#, #""de":{"body":"Angekommen"}"#), (#""de":{"title":"Angekommen"}"#, #""de":"Angekommen""#),
        ] {
            #expect(text.contains(part), "\(part)")
            #expect(throws: MessageDecodingError.self, "\(broken)") {
                try IsletJSON.decode(ActivityEvent.self, from: Array(text.replacingOccurrences(of: part, with: broken).utf8))
            }
        }
    }

    @Test("an update: its relevance, stale time, alert texts and sound in place of the state's")
    func update() throws {
        var memory = ActivityMemory()
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(relevanceScore: 77, staleAfterSeconds: 60, sound: "ding.caf", alert: .init(title: "Ana is here", body: "Door 4B"))
        let sent = try aps(try #require(try requests(made, memory: &memory).first))
        #expect(sent["relevance-score"] == .integer(77) || sent["relevance-score"] == .number(77))
        #expect(sent["stale-date"] == .integer(Int64(now.timeIntervalSince1970) + 60))
        #expect(sent["alert"] == .object(["title": .string("Ana is here"), "body": .string("Door 4B"), "sound": .string("ding.caf")]))

        // Routine: the alert policy still decides; no alert.
        var quiet = event("DeliveryAttributes", .update, sequence: 2, urgency: .routine, ["status": .string("delivered"), "orderId": .string("42")])
        quiet.presentation = EventPresentation(alert: .init(title: "Delivered"))
        #expect(try aps(try #require(try requests(quiet, memory: &memory).first))["alert"] == nil)
    }

    @Test("a dismissal time is sent within 4 hours of the end's sending, whatever the event's own time")
    func dismissalWithinFourHours() throws {
        var memory = ActivityMemory()
        // The backend's clock is 10 hours ahead: its event is valid (3 h after its own time).
        var made = event("DeliveryAttributes", .end, sequence: 1, urgency: .routine, at: 10 * 3_600, Self.arriving)
        made.presentation = EventPresentation(dismissal: .at(now.addingTimeInterval(13 * 3_600)))
        try made.validate()
        let end = try #require(try requests(made, memory: &memory).last)
        #expect(try aps(end)["dismissal-date"] == .integer(Int64(now.timeIntervalSince1970) + 4 * 3_600))
    }

    @Test("an end: dismissed at once, at the event's time, or by the policy when it says nothing")
    func dismissal() throws {
        for (dismissal, expected) in [
            (EventPresentation.Dismissal.immediate, Int64(now.timeIntervalSince1970) - 1),
            (.at(now.addingTimeInterval(600)), Int64(now.timeIntervalSince1970) + 600),
            (nil, ContentPolicy().dismissalDate(now: now)!),
        ] {
            var memory = ActivityMemory()
            var made = event("DeliveryAttributes", .end, sequence: 1, urgency: .routine, Self.arriving)
            made.presentation = dismissal.map { EventPresentation(dismissal: $0) }
            let end = try #require(try requests(made, memory: &memory).last)
            #expect(try aps(end)["dismissal-date"] == .integer(expected), "\(String(describing: dismissal))")
        }
    }

    static let translated = EventPresentation.Alert(
        title: "Ana is here", body: "Door 4B",
        translations: ["zh-Hans": .init(title: "Ana 已到达", body: "4B 门口"), "zh-Hant": .init(title: "Ana 已到達"), "de": .init(title: "Ana ist da", body: "Tür 4B")])

    @Test("an event's own alert in the token's language: the translation the template's translations would choose, else its own texts", arguments: [
        ("zh-Hans-CN", JSONValue.object(["title": .string("Ana 已到达"), "body": .string("4B 门口")])),
        ("zh-CN", .object(["title": .string("Ana 已到达"), "body": .string("4B 门口")])),
        ("zh-TW", .object(["title": .string("Ana 已到達")])),  // a translation without a body: none (not the default language's)
        ("de-AT", .object(["title": .string("Ana ist da"), "body": .string("Tür 4B")])),
        ("fr-FR", .object(["title": .string("Ana is here"), "body": .string("Door 4B")])),
        ("not a tag", .object(["title": .string("Ana is here"), "body": .string("Door 4B")])),
    ] as [(String, JSONValue)])
    func translatedAlert(locale: String, expected: JSONValue) throws {
        var memory = ActivityMemory()
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(alert: Self.translated)
        let sent = try aps(try #require(try requests(made, locale: locale, memory: &memory).first))
        #expect(sent["alert"]?.removing("sound") == expected)
        // Chosen by the same function as the template's language (none for no locale).
        #expect(ActivityTemplate.language(for: locale, in: Self.translated.translations!)?.title ?? "Ana is here" == expected["title"]?.stringValue)
        #expect(ActivityTemplate.language(for: nil, in: Self.translated.translations!) == nil)
    }

    @Test("an event's own alert by loc keys: sent as {loc-key, loc-args}, as a template's loc-key alert is; a push-to-start too")
    func locKeyAlert() throws {
        var memory = ActivityMemory()
        var made = event("DeliveryAttributes", .update, sequence: 1, Self.arriving)
        made.presentation = EventPresentation(alert: .init(titleLocKey: "COURIER_HERE", bodyLocKey: "DOOR", bodyLocArgs: ["4B", "Ana"]))
        let sent = try aps(try #require(try requests(made, locale: "zh-Hans-CN", memory: &memory).first))
        #expect(sent["alert"]?.removing("sound") == .object([
            "title": .object(["loc-key": .string("COURIER_HERE")]),
            "body": .object(["loc-key": .string("DOOR"), "loc-args": .array([.string("4B"), .string("Ana")])]),
        ]))
        // A loc-key title with a text body; a translation for the locale wins over the keys.
        made.presentation = EventPresentation(alert: .init(body: "Door 4B", titleLocKey: "COURIER_HERE", translations: ["zh-Hans": .init(title: "已到达")]))
        memory = ActivityMemory()
        #expect(try aps(try #require(try requests(made, locale: "en-GB", memory: &memory).first))["alert"]?.removing("sound")
            == .object(["title": .object(["loc-key": .string("COURIER_HERE")]), "body": .string("Door 4B")]))
        memory = ActivityMemory()
        #expect(try aps(try #require(try requests(made, locale: "zh-Hans-CN", memory: &memory).first))["alert"]?.removing("sound")
            == .object(["title": .string("已到达")]))
        // A push-to-start's required alert is the event's, by key.
        var start = event("DeliveryAttributes", .start, sequence: 1, Self.arriving, startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("42")])
        start.presentation = EventPresentation(alert: .init(titleLocKey: "ORDER_STARTED"))
        memory = ActivityMemory()
        #expect(try aps(try #require(try requests(start, memory: &memory).first))["alert"]?["title"] == .object(["loc-key": .string("ORDER_STARTED")]))
    }

    @Test("to fit 4 KB a translated alert is cut like any alert text, and a loc key's arguments are, never the key")
    func shrinkCutsTranslatedAlert() throws {
        let name = String(repeating: "🚲", count: 3_000)  // 12 KB in the content state: texts must be cut to 256 characters
        let long: [String: JSONValue] = ["status": .string("arriving"), "orderId": .string("42"), "courier": .object(["name": .string(name)])]
        let body = String(repeating: "请到门口取餐", count: 56)  // 336 characters, 1008 bytes
        var memory = ActivityMemory()
        var made = event("DeliveryAttributes", .update, sequence: 1, long)
        made.presentation = EventPresentation(alert: .init(title: "Here", body: "Door 4B", translations: ["zh-Hans": .init(title: "已到达", body: body)]))
        let result = try assembler().assemble(made, app: app, appVersion: AppVersion("2.0")!, locale: "zh-Hans-CN", memory: &memory, now: now)
        #expect(result.requests[0].payload.utf8.count <= PushRequest.maximumPayloadBytes)
        #expect(result.shrinks.last?.hasPrefix("texts cut to") == true, "\(result.shrinks)")
        let alert = try #require(try aps(result.requests[0])["alert"])
        let cut = try #require(alert["body"]?.stringValue)
        #expect(cut.hasPrefix("请到门口取餐") && cut.hasSuffix("…") && cut.count < body.count, "\(cut) \(result.shrinks)")
        #expect(alert["title"] == .string("已到达"))

        memory = ActivityMemory()
        let key = "COURIER_" + String(repeating: "K", count: 240)
        // 16 arguments of 256 bytes: 4 KB by themselves.
        made.presentation = EventPresentation(alert: .init(title: "Here", bodyLocKey: key, bodyLocArgs: Array(repeating: String(repeating: "Ana ", count: 64), count: 16)))
        let keyed = try assembler().assemble(made, app: app, appVersion: AppVersion("2.0")!, locale: "zh-Hans-CN", memory: &memory, now: now)
        let keyedBody = try #require(try aps(keyed.requests[0])["alert"]?["body"])
        #expect(keyedBody["loc-key"] == .string(key), "the key is never cut")
        guard case .array(let args)? = keyedBody["loc-args"] else { Issue.record("no loc-args"); return }
        #expect(args.count == 16 && args.allSatisfy { $0.stringValue?.hasSuffix("…") == true }, "\(args) \(keyed.shrinks)")
        #expect(keyed.requests[0].payload.utf8.count <= PushRequest.maximumPayloadBytes)
    }
}

extension JSONValue {
    /// The object without its member `key`.
    func removing(_ key: String) -> JSONValue {
        guard case .object(var members) = self else { return self }
        members[key] = nil
        return .object(members)
    }
}
