import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Mustache
import Testing
@testable import ContentService

@Suite("Languages: tags, translations, the phone's own localization")
struct LanguageTests {
    @Test("language tags are made canonical; Apple's underscores are taken; what is not a tag is refused")
    func tags() {
        #expect(LanguageTag("zh_hans_cn")?.description == "zh-Hans-CN")
        #expect(LanguageTag("EN-us")?.description == "en-US")
        #expect(LanguageTag("pt-BR")?.description == "pt-BR")
        #expect(LanguageTag("es-419")?.description == "es-419")
        for bad in ["", "c", "chinese", "zh-", "zh--CN", "zh CN", "中文", "zh-Hans-CN-" + String(repeating: "a", count: 30), "1a"] {
            #expect(LanguageTag(bad) == nil, "\(bad)")
        }
    }

    @Test("the fallbacks, most specific first; Chinese without a script gets the one its region writes in")
    func fallbacks() {
        #expect(LanguageTag("zh-Hans-CN")!.fallbacks == ["zh-Hans-CN", "zh-Hans", "zh"])
        #expect(LanguageTag("zh-CN")!.fallbacks == ["zh-CN", "zh-Hans-CN", "zh-Hans", "zh"])
        #expect(LanguageTag("zh-TW")!.fallbacks == ["zh-TW", "zh-Hant-TW", "zh-Hant", "zh"])
        #expect(LanguageTag("zh")!.fallbacks == ["zh-Hans", "zh"])
        #expect(LanguageTag("en-GB")!.fallbacks == ["en-GB", "en"])
    }

    @Test("an activity's template in its locale: the nearest language the template has, else the default texts")
    func localized() throws {
        let delivery = try TemplateLoader.load(directory: templatesDirectory)["DeliveryAttributes"]!
        #expect(Set(delivery.languages.keys) == ["zh-Hans"])
        func placed(_ locale: String?) -> String { delivery.localized(locale).states["placed"]!.text!.render([:]) }
        #expect(placed(nil) == "Order received")
        #expect(placed("zh-Hans-CN") == "订单已接收")
        #expect(placed("zh-CN") == "订单已接收")
        #expect(placed("zh") == "订单已接收")
        #expect(placed("zh-TW") == "Order received", "no traditional Chinese in the template: the default")
        #expect(placed("en-US") == "Order received")
        #expect(placed("not a tag at all") == "Order received")
        // A text the translation does not list stays as written.
        #expect(delivery.localized("zh").link.render(["orderId": "42"]) == "fooddelivery://order/42")
    }

    static let base = """
        attributesType: X
        defaultState: a
        link: x
        contentState: [{ name: who, type: string, default: "" }]
        states:
          a:
            text: "Hello {{who}}"
            alert: { title: "Hi", body: { locKey: GREETING, locArgs: ["{{who}}"] } }
        examples: [{ who: Ana }]
        """

    @Test("a translation that is not a text of the template, a tag not in canonical form, or a variable no example gives is refused at start-up",
          arguments: [
            ("translations: { zh-Hans: { \"Helo {{who}}\": \"你好\" } }", "translations.zh-Hans", "is not a text of this template"),
            ("translations: { zh-hans: { \"Hi\": \"嗨\" } }", "translations.zh-hans", "language tag"),
            ("translations: { zh-Hans: { \"Hello {{who}}\": \"你好 {{whom}}\" } }", "translations.zh-Hans[\"Hello {{who}}\"] (states.a.text)", "{{whom}}"),
          ])
    func refused(translations: String, path: String, problem: String) {
        let error = #expect(throws: TemplateError.self) { try TemplateLoader.load(text: Self.base + "\n" + translations, file: "x.yaml") }
        #expect(error?.path == path, "\(String(describing: error))")
        #expect(error?.problem.contains(problem) == true, "\(String(describing: error))")
    }

    /// A state's text is rendered before the content state exists: it sees the event's fields, not
    /// the content state's values. Its translation is judged the same way (it was judged as a
    /// layout text, which sees them, and passed).
    @Test("a state text's translation that uses a value only the content state has is refused, as the text itself would be")
    func translatedStateTextSeesNoContentState() {
        let template = """
            attributesType: X
            defaultState: a
            link: x
            contentState: [{ name: who, type: string, default: "" }, { name: shout, type: string, value: "{{who}}!" }]
            states:
              a: { text: "Hello {{who}}" }
            examples: [{ who: Ana }]
            """
        let written = #expect(throws: TemplateError.self) {
            try TemplateLoader.load(text: template.replacingOccurrences(of: "Hello {{who}}", with: "Hello {{shout}}"), file: "x.yaml")
        }
        #expect(written?.path == "states.a.text", "\(String(describing: written))")
        let translated = #expect(throws: TemplateError.self) {
            try TemplateLoader.load(text: template + "\ntranslations: { zh-Hans: { \"Hello {{who}}\": \"你好 {{shout}}\" } }", file: "x.yaml")
        }
        #expect(translated?.path == "translations.zh-Hans[\"Hello {{who}}\"] (states.a.text)", "\(String(describing: translated))")
        #expect(translated?.problem.contains("{{shout}}") == true, "\(String(describing: translated))")
    }

    @Test("an alert the template leaves to the phone: loc-key and loc-args rendered here, in every language; its texts translated")
    func localizedByThePhone() throws {
        let template = try TemplateLoader.load(text: Self.base + "\ntranslations: { zh-Hans: { \"Hi\": \"嗨\", \"Hello {{who}}\": \"你好，{{who}}\" } }", file: "x.yaml")
        let alert = LiveActivityAPS.Alert(template.localized("zh-CN").states["a"]!.alert!, context: ["who": "Ana"])
        #expect(alert.json == .object(["title": .string("嗨"), "body": .object(["loc-key": .string("GREETING"), "loc-args": .array([.string("Ana")])])]))
        // Cut to fit 4 KB: the arguments are cut, never the key.
        #expect(alert.cut(to: 2).body == .localized(key: "GREETING", args: [PayloadAssembler.cut("Ana", to: 2)]))
    }

    /// Seen in CI: the app registers its activity token right after a push-to-start, and the
    /// backend's first update can be read before that record is.
    @Test("an activity started by a push is updated in the push-to-start token's language until its own token is read, then in that one's; after a restart too")
    func updateBeforeTheActivityToken() throws {
        let tokens = PartitionTokens.whole()
        let start = TokenRecord(
            kind: .pushToStart, deviceId: "d1", userId: "ana", token: String(repeating: "ab", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
            updatedAt: now, locale: "zh-Hans-CN")
        tokens.put(start, key: start.key!)
        let engine = ContentEngine(assembler: try assembler(), tokens: tokens, clock: ManualClock(now))
        func sent(_ event: ActivityEvent, by engine: ContentEngine) throws -> String {
            guard case .send(let prepared) = try engine.prepare(event) else { throw ContentError(field: "-", problem: "ignored") }
            engine.commit(prepared)
            return prepared.requests.map(\.payload).joined()
        }
        func status(_ sequence: Int64, _ status: String, _ kind: ActivityEventKind = .update) -> ActivityEvent {
            var update = event("DeliveryAttributes", kind, sequence: sequence, ["orderId": .string("42"), "status": .string(status)])
            update.bundleId = app.bundleId
            return update
        }
        var begin = event(
            "DeliveryAttributes", .start, sequence: 1, ["orderId": .string("42"), "status": .string("placed")],
            startTarget: .init(app: app, deviceId: "d1"), attributes: ["orderId": .string("42")])
        begin.bundleId = app.bundleId
        #expect(try sent(begin, by: engine).contains("订单已接收"))
        // No activity token yet: the first update, and the next, in the push-to-start token's language.
        #expect(try sent(status(2, "preparing"), by: engine).contains("正在为您备货"))
        #expect(try sent(status(3, "placed"), by: engine).contains("订单已接收"))

        // After a restart, from the changelog.
        let key = MessageKey.activity(bundleId: app.bundleId, activityId: "order-42")
        let record = try #require(engine.memory(of: key)).record(activityKey: key, partition: 0)
        #expect(record.startedWith == start.key)
        let restarted = ContentEngine(assembler: try assembler(), tokens: tokens, clock: ManualClock(now))
        restarted.restore(key, ActivityMemory(record))
        #expect(try sent(status(4, "preparing"), by: restarted).contains("正在为您备货"))

        // The activity's own token, in English: its language from then on.
        let own = TokenRecord(
            kind: .update, activityId: "order-42", userId: "ana", token: String(repeating: "cd", count: 32), app: app,
            attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "3.0", state: .active, registeredAt: now,
            updatedAt: now, locale: "en-US")
        tokens.put(own, key: own.key!)
        #expect(try sent(status(5, "placed"), by: engine).contains("Order received"))
        // Ended: nothing of the start is kept.
        _ = try sent(status(6, "delivered", .end), by: engine)
        #expect(engine.memory(of: key)?.startedWith == nil)
    }
}
