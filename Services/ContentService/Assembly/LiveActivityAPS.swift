import Foundation
import IsletMessages
import Mustache

/// The `aps` dictionary of a Live Activity push, as ActivityKit reads it (docs/payloads.md; Apple's
/// "Starting and updating Live Activities with ActivityKit push notifications").
struct LiveActivityAPS: Sendable, Equatable {
    /// What the phone shows and sounds: a title, a body, a sound file.
    struct Alert: Sendable, Equatable {
        /// A text, or a key of the app's `Localizable.strings` with its arguments (the phone
        /// localizes it): `{"loc-key": …, "loc-args": […]}` in the payload.
        enum Text: Sendable, Equatable {
            case text(String)
            case localized(key: String, args: [String])

            init(_ text: ActivityTemplate.AlertText, context: [String: Any]) {
                switch text {
                case .text(let template): self = .text(template.render(context))
                case .localized(let key, let args): self = .localized(key: key, args: args.map { $0.render(context) })
                }
            }

            /// Cut to `cap` characters: the text, or each argument (a key is never cut).
            func cut(to cap: Int) -> Text {
                switch self {
                case .text(let text): .text(PayloadAssembler.cut(text, to: cap))
                case .localized(let key, let args): .localized(key: key, args: args.map { PayloadAssembler.cut($0, to: cap) })
                }
            }

            var json: JSONValue {
                switch self {
                case .text(let text): .string(text)
                case .localized(let key, let args):
                    .object(args.isEmpty ? ["loc-key": .string(key)] : ["loc-key": .string(key), "loc-args": .array(args.map(JSONValue.string))])
                }
            }
        }

        var title: Text
        var body: Text?
        var sound: String?

        init(title: String, body: String? = nil, sound: String? = nil) {
            self.init(title: .text(title), body: body.map(Text.text), sound: sound)
        }

        init(title: Text, body: Text?, sound: String?) {
            self.title = title
            self.body = body
            self.sound = sound
        }

        /// A template's alert rendered over `context`.
        init(_ alert: ActivityTemplate.Alert, context: [String: Any]) {
            self.init(title: Text(alert.title, context: context), body: Text(alert.body, context: context), sound: alert.sound)
        }

        /// An event's own alert (``EventPresentation/Alert``) for a phone in `locale`: its
        /// translation for that language, chosen as a template's are
        /// (``ActivityTemplate/language(for:in:)``), else its own title and body, each a text or a
        /// loc key with its arguments.
        init(_ alert: EventPresentation.Alert, locale: String?, sound: String?) {
            if let translated = alert.translations.flatMap({ ActivityTemplate.language(for: locale, in: $0) }) {
                self.init(title: translated.title, body: translated.body, sound: sound)
                return
            }
            // Validated: a title or a title key (a missing one would be an empty title).
            let title = alert.titleLocKey.map { Text.localized(key: $0, args: alert.titleLocArgs ?? []) } ?? .text(alert.title ?? "")
            let body = alert.bodyLocKey.map { Text.localized(key: $0, args: alert.bodyLocArgs ?? []) } ?? alert.body.map(Text.text)
            self.init(title: title, body: body, sound: sound)
        }

        /// Title and body cut to `cap` characters (the sound is a file name: never cut).
        func cut(to cap: Int) -> Alert {
            Alert(title: title.cut(to: cap), body: body.map { $0.cut(to: cap) }, sound: sound)
        }

        var json: JSONValue {
            var members: [String: JSONValue] = ["title": title.json]
            if let body { members["body"] = body.json }
            if let sound { members["sound"] = .string(sound) }
            return .object(members)
        }
    }

    /// What only a push-to-start carries: the activity's type and static attributes; it asks for
    /// the new activity's push token (`input-push-token`), or (iOS 18) names the broadcast channel
    /// the new activity subscribes to (`input-push-channel`) instead.
    struct Start: Sendable, Equatable {
        var attributesType: String
        var attributes: [String: JSONValue]
        var channelId: String? = nil
    }

    var event: ActivityEventKind
    var timestamp: Int64
    var contentState: [String: JSONValue]
    var staleDate: Int64
    var relevanceScore: Double
    var alert: Alert?
    var dismissalDate: Int64?
    var start: Start?

    var json: JSONValue {
        var aps: [String: JSONValue] = [
            "timestamp": .integer(timestamp), "event": .string(event.rawValue), "content-state": .object(contentState),
            "stale-date": .integer(staleDate), "relevance-score": .number(relevanceScore),
        ]
        if let start {
            aps["attributes-type"] = .string(start.attributesType)
            aps["attributes"] = .object(start.attributes)
            if let channelId = start.channelId {
                aps["input-push-channel"] = .string(channelId)
            } else {
                aps["input-push-token"] = .integer(1)
            }
        }
        if let alert { aps["alert"] = alert.json }
        if let dismissalDate { aps["dismissal-date"] = .integer(dismissalDate) }
        return .object(["aps": .object(aps)])
    }

    /// The payload: `{"aps": …}` with sorted keys and unescaped slashes, so that equal content is
    /// equal bytes and URLs stay short.
    var payload: String { String(decoding: json.jsonBytes, as: UTF8.self) }
}
