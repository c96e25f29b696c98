import Foundation
import IsletMessages
import Mustache

/// The `aps` dictionary of a Live Activity push, as ActivityKit reads it (docs/payloads.md; Apple's
/// "Starting and updating Live Activities with ActivityKit push notifications").
struct LiveActivityAPS: Sendable, Equatable {
    /// What the phone shows and sounds: a title, a body, a sound file.
    struct Alert: Sendable, Equatable {
        var title: String
        var body: String?
        var sound: String?

        init(title: String, body: String? = nil, sound: String? = nil) {
            self.title = title
            self.body = body
            self.sound = sound
        }

        /// A template's alert rendered over `context`.
        init(_ alert: ActivityTemplate.Alert, context: [String: Any]) {
            self.init(title: alert.title.render(context), body: alert.body.render(context), sound: alert.sound)
        }

        /// Title and body cut to `cap` characters (the sound is a file name: never cut).
        func cut(to cap: Int) -> Alert {
            Alert(title: PayloadAssembler.cut(title, to: cap), body: body.map { PayloadAssembler.cut($0, to: cap) }, sound: sound)
        }

        var json: JSONValue {
            var members: [String: JSONValue] = ["title": .string(title)]
            if let body { members["body"] = .string(body) }
            if let sound { members["sound"] = .string(sound) }
            return .object(members)
        }
    }

    /// What only a push-to-start carries: the activity's type and static attributes; it asks for
    /// the new activity's push token (`input-push-token`).
    struct Start: Sendable, Equatable {
        var attributesType: String
        var attributes: [String: JSONValue]
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
            aps["input-push-token"] = .integer(1)
        }
        if let alert { aps["alert"] = alert.json }
        if let dismissalDate { aps["dismissal-date"] = .integer(dismissalDate) }
        return .object(["aps": .object(aps)])
    }

    /// The payload: `{"aps": …}` with sorted keys and unescaped slashes, so that equal content is
    /// equal bytes and URLs stay short.
    var payload: String { String(decoding: json.jsonBytes, as: UTF8.self) }
}
