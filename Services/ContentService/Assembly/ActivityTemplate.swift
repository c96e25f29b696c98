import Foundation
import IsletMessages
import Mustache
import Yams

/// How one attributes type turns domain events into ActivityKit content: the content-state schema
/// the app decodes (fields, types, defaults, the app version each appeared in), the server-driven
/// layout, and per state its stale time, relevance, alert and links. Loaded from a YAML (or JSON)
/// file at start-up, so product teams change a Live Activity without a Swift release.
/// docs/templates.md describes the format.
public struct ActivityTemplate: Sendable {
    public struct Field: Sendable {
        public enum Kind: String, Sendable, Decodable {
            case string, int, double, bool, date
            /// A `ClosedRange<Date>`: encoded as its `Codable` conformance does, `[lower, upper]`
            /// in seconds since 2001 (what `Text(timerInterval:)` and `ProgressView(timerInterval:)` animate).
            case dateRange
            /// A `String`-backed Swift enum: one of ``Field/values`` known to the app version.
            case enumeration = "enum"
            /// An array of ``Field/items``' kind.
            case array
            /// A nested `Codable` struct of ``Field/fields``.
            case object
        }

        /// A case of an `enum` field, the first app version that decodes it, and the case an older
        /// app is sent instead (`olderApps`; else the field's default).
        public struct EnumValue: Sendable, Equatable {
            public var value: String
            public var since: AppVersion
            public var standIn: String?
        }

        /// The content-state key (the Swift property of `ContentState`).
        public var name: String
        public var kind: Kind
        /// The first app version whose `ContentState` has this field: older apps are not sent it,
        /// newer ones always are (with `fallback` when the event lacks a value).
        public var since: AppVersion
        /// Where the value comes from: a domain field (dotted path) …
        public var source: String?
        /// … or a Mustache template over the domain fields and the state (strings only).
        public var template: TemplateText?
        /// The value when the event has none. Required unless `optional`.
        public var fallback: JSONValue?
        /// A Swift optional in the app: `null` is a value.
        public var optional: Bool
        /// A text for people (`text: true`, or any `value:` template): may be cut, with an ellipsis,
        /// to fit 4 KB. Other fields (ids, states, URLs) are never cut.
        public var isText = false
        /// An `enum`'s cases.
        public var values: [EnumValue] = []
        /// An `array`'s element (one field, without a name or a source of its own).
        public var items: [Field] = []
        /// An `object`'s members.
        public var fields: [Field] = []
    }

    /// One element of the server-driven UI.
    public enum Component: Sendable {
        /// Texts, icons and timers in a row, read out as `accessibility`.
        case richText([RichTextElement], accessibility: TemplateText?)
        /// A progress bar, 0–100, with marks (route points) along it.
        case progressBar(position: TemplateText, points: [Double], accessibility: TemplateText?)
        /// An image by URL; its 72×72 JPEG may be inlined while it fits the payload.
        case remoteImage(url: TemplateText, accessibility: TemplateText?)
    }

    public struct RichTextElement: Sendable {
        public enum Kind: Sendable {
            case text(TemplateText)
            case icon(String)
            /// A countdown or count-up to a date field.
            case timer(field: String, countsDown: Bool)
        }

        public var kind: Kind
        /// Texts with a rank may be dropped, lowest rank first, when the payload is over 4 KB.
        public var rank: Int?
        /// This element links somewhere (a `Link`): its URL is signed like the widget's.
        public var element: String?
    }

    /// The server-driven layout: one list of components per region of the widget.
    ///
    /// Element links (``RichTextElement/element``) may stand only where the user can tap an
    /// element: the Lock Screen and the expanded island, whose links name their surface
    /// (`lockScreen`, `islandExpanded`). The collapsed island (`minimal`, `compactLeading`,
    /// `compactTrailing`) opens its one widget URL wherever it is tapped (Hema: "only one
    /// widgetUrl is supported when the island is collapsed"), so the loader refuses element links
    /// there.
    public struct Layout: Sendable {
        /// The first app version that renders server-driven layouts.
        public var since: AppVersion
        public var minimal: [Component]
        public var compactLeading: [Component]
        public var compactTrailing: [Component]
        public var expanded: [Component]
        /// The Lock Screen's own components, sent as `lockScreen`, their element links signed for
        /// the Lock Screen; `nil` when the template has no such region: nothing is sent, and an app
        /// that shows the expanded components on the Lock Screen reports their taps as
        /// `islandExpanded`, the surface their links name.
        public var lockScreen: [Component]?

        /// Every component of every region.
        public var allComponents: [Component] { minimal + compactLeading + compactTrailing + expanded + (lockScreen ?? []) }
    }

    public struct Alert: Sendable {
        public var title: AlertText
        public var body: AlertText
        public var sound: String?
    }

    /// An alert's title or body: a text rendered here, or a key of the app's `Localizable.strings`
    /// with arguments rendered here, which the phone localizes (APNs `loc-key`, `loc-args`).
    public enum AlertText: Sendable {
        case text(TemplateText)
        case localized(key: String, args: [TemplateText])
    }

    public struct State: Sendable {
        public var name: String
        /// Shown as `state.text` to templates.
        public var text: TemplateText?
        public var staleAfter: Duration
        public var relevance: Double
        /// The alert to show when the activity enters this state (subject to the alert policy).
        public var alert: Alert?
    }

    /// The widgets an activity's events refresh (``ActivityTemplate/widgets``): on every device of
    /// the activity's user with a widget token for one of `kinds`, one `content-changed` push per
    /// device when an event's content enters one of `states` (every change of state when `nil`), and
    /// when an event ends the activity (not the freshness monitor's own ends). Updates within a state (a courier's position) refresh nothing: a widget's reloads
    /// are budgeted by iOS.
    public struct WidgetRefresh: Sendable, Equatable {
        /// Widget kinds (`WidgetConfiguration`'s `kind`), in order of preference.
        public var kinds: [String]
        /// The states whose entry refreshes the widgets; `nil`: every change of state.
        public var states: Set<String>?

        /// Whether content of `state` after `previous` (`nil`: the activity's first content), or an
        /// end, refreshes the widgets.
        public func refreshes(state: String?, previous: String?, isEnd: Bool) -> Bool {
            if isEnd { return true }
            guard let state, state != previous else { return false }
            return states.map { $0.contains(state) } ?? true
        }
    }

    public var attributesType: String
    public var description: String
    /// The app the activities of this type belong to, for requests whose activity has no token
    /// registered yet (the token's own app and environment win once it has one).
    public var app: AppTarget?
    /// The domain field whose value names the state (`status`).
    public var stateField: String
    /// The app's URL for the activity (Mustache over the domain fields); analytics parameters are added.
    public var link: TemplateText
    public var attributes: [Field]
    public var contentState: [Field]
    public var layout: Layout?
    public var states: [String: State]
    /// The state an unknown or missing state value falls back to.
    public var defaultState: String
    /// Sent by broadcast (iOS 18): every request of an activity of this type goes to the
    /// activity's broadcast channel, one push for every phone subscribed, made with this
    /// `message-storage-policy` (0 no message stored, 1 the latest stored). Its content is
    /// rendered for the newest app version in the default language (one payload for everyone).
    public var broadcastStoragePolicy: Int?
    /// Which of the app's home-screen widgets an activity's events refresh by WidgetKit push
    /// (iOS 26), and when; `nil`: none.
    public var widgets: WidgetRefresh? = nil
    /// The same template in other languages (by canonical BCP 47 tag): its texts as the file's
    /// `translations` give them, the default ones where they give none.
    public var languages: [String: ActivityTemplate] = [:]

    /// The template in `locale`'s language: the first of its fallbacks (``LanguageTag/fallbacks``)
    /// the template has, else the default texts.
    public func localized(_ locale: String?) -> ActivityTemplate {
        Self.language(for: locale, in: languages) ?? self
    }

    /// What `byLanguage` (keyed by canonical language tag) has for `locale`: its entry for the
    /// first of the locale's fallbacks it has (``LanguageTag/fallbacks``: `zh-Hans-CN`, `zh-Hans`,
    /// `zh`; `zh-TW` → `zh-Hant`), else nil (no match, or no locale). The one way a language is
    /// chosen: a template's translations and an event's own alert translations alike.
    public static func language<Value>(for locale: String?, in byLanguage: [String: Value]) -> Value? {
        guard !byLanguage.isEmpty, let tag = locale.flatMap(LanguageTag.init) else { return nil }
        for candidate in tag.fallbacks {
            if let value = byLanguage[candidate] { return value }
        }
        return nil
    }
}
