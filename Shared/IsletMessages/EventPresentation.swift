import Foundation

/// How one event is presented on the phone, where it differs from its template's state and the
/// service's policy (``ActivityEvent/presentation``): a backend ends one order at once and lets
/// another linger, raises the one ride that is arriving, or words the alert of this event. Each
/// member is optional; an absent one is the template's (or the policy's).
public struct EventPresentation: Codable, Sendable, Hashable {
    /// When an ended activity leaves the Lock Screen (`aps.dismissal-date`): only on an `end`.
    public enum Dismissal: Codable, Sendable, Hashable {
        /// At once.
        case immediate
        /// At this time: not before the event, at most 4 hours after it (iOS keeps an ended
        /// activity 4 hours at most).
        case at(Date)

        /// `immediate`, or an ISO 8601 time.
        public init?(text: String) {
            if text == "immediate" {
                self = .immediate
            } else if let date = IsletDate.parse(text) {
                self = .at(date)
            } else {
                return nil
            }
        }

        public init(from decoder: any Decoder) throws {
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let dismissal = Dismissal(text: text) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "must be \"immediate\" or an ISO 8601 date, is \(text)"))
            }
            self = dismissal
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .immediate: try container.encode("immediate")
            case .at(let date): try container.encode(IsletDate.format(date))
            }
        }
    }

    /// The texts of this event's alert, in place of the state's (whether it alerts is still the
    /// alert policy's: the urgency, a change of state, the fatigue limit).
    ///
    /// The title is a text (`title`) or a key of the app's `Localizable.strings` with its arguments
    /// (`titleLocKey`, `titleLocArgs`: APNs `loc-key`, `loc-args`, localized by the phone); one of
    /// the two, never both (refused: which one the backend meant is not for us to guess). The body
    /// likewise, and optional. `translations` gives the alert in other languages: the one for the
    /// activity's language is chosen as a template's translations are (the locale, then shorter
    /// down to the language; Chinese by script), its title and body in place of all of the above;
    /// none matching, the alert's own.
    public struct Alert: Codable, Sendable, Hashable {
        /// The alert in one language.
        public struct Translation: Codable, Sendable, Hashable {
            public var title: String
            /// None: the alert has no body in this language.
            public var body: String?

            public init(title: String, body: String? = nil) {
                self.title = title
                self.body = body
            }
        }

        public var title: String?
        public var body: String?
        public var titleLocKey: String?
        public var titleLocArgs: [String]?
        public var bodyLocKey: String?
        public var bodyLocArgs: [String]?
        /// By canonical language tag (`zh-Hans`, `pt-BR`).
        public var translations: [String: Translation]?

        public init(
            title: String? = nil, body: String? = nil, titleLocKey: String? = nil, titleLocArgs: [String]? = nil, bodyLocKey: String? = nil,
            bodyLocArgs: [String]? = nil, translations: [String: Translation]? = nil
        ) {
            self.title = title
            self.body = body
            self.titleLocKey = titleLocKey
            self.titleLocArgs = titleLocArgs
            self.bodyLocKey = bodyLocKey
            self.bodyLocArgs = bodyLocArgs
            self.translations = translations
        }

        /// Most languages an alert may carry.
        public static let maximumTranslations = 50
        /// Most arguments of a loc key.
        public static let maximumLocArgs = 16
        /// The most bytes of one key's arguments in all.
        public static let maximumLocArgBytes = 512

        /// The limits of each member, each refusal naming the member.
        func validate() throws(MessageValidationError) {
            func fail(_ member: String, _ problem: String) -> MessageValidationError {
                MessageValidationError(field: "presentation.alert.\(member)", problem: problem)
            }
            try Self.validateText(title: title, body: body, at: "presentation.alert.")
            if title != nil, titleLocKey != nil { throw fail("titleLocKey", "give title or titleLocKey, not both") }
            if title == nil, titleLocKey == nil { throw fail("title", "is required (or titleLocKey)") }
            if body != nil, bodyLocKey != nil { throw fail("bodyLocKey", "give body or bodyLocKey, not both") }
            for (key, args, name) in [(titleLocKey, titleLocArgs, "title"), (bodyLocKey, bodyLocArgs, "body")] {
                if let key, !(1...256).contains(key.utf8.count) { throw fail("\(name)LocKey", "must be 1-256 bytes") }
                guard let args else { continue }
                guard key != nil else { throw fail("\(name)LocArgs", "only with \(name)LocKey") }
                // In bytes, not only characters: the 4 KB shrink cuts arguments to 32 characters at
                // the least, which is 128 bytes of emoji, and a key is never cut.
                guard args.count <= Self.maximumLocArgs, args.allSatisfy({ $0.utf8.count <= 256 }),
                    args.reduce(0, { $0 + $1.utf8.count }) <= Self.maximumLocArgBytes
                else {
                    throw fail(
                        "\(name)LocArgs", "at most \(Self.maximumLocArgs) arguments of at most 256 bytes each, \(Self.maximumLocArgBytes) bytes in all")
                }
            }
            guard let translations else { return }
            guard translations.count <= Self.maximumTranslations else {
                throw fail("translations", "at most \(Self.maximumTranslations) languages")
            }
            for (tag, translation) in translations.sorted(by: { $0.key < $1.key }) {
                // As a token's locale is registered (TokenRecord.locale): what the locale is matched against.
                guard LanguageTag(tag)?.description == tag else {
                    // The tag is named only when it is short and printable: it goes back in the answer and the logs.
                    let nameable = tag.utf8.count <= 35 && tag.utf8.allSatisfy { (0x21...0x7e).contains($0) }
                    throw nameable
                        ? fail("translations.\(tag)", "must be a canonical language tag (BCP 47), like zh-Hans or pt-BR")
                        : fail("translations", "holds a key that is not a canonical language tag (BCP 47) of at most 35 characters, like zh-Hans or pt-BR")
                }
                try Self.validateText(title: translation.title, body: translation.body, at: "presentation.alert.translations.\(tag).")
            }
        }

        /// A title of 1-256 bytes (when given) and a body of at most 1024.
        private static func validateText(title: String?, body: String?, at prefix: String) throws(MessageValidationError) {
            if let title, !(1...256).contains(title.utf8.count) {
                throw MessageValidationError(field: prefix + "title", problem: "must be 1-256 bytes")
            }
            if let body, body.utf8.count > 1_024 {
                throw MessageValidationError(field: prefix + "body", problem: "must be at most 1024 bytes")
            }
        }
    }

    public var dismissal: Dismissal?
    /// `aps.relevance-score`, 0–100: the highest of a user's activities gets the Dynamic Island.
    public var relevanceScore: Double?
    /// The content goes stale this many seconds after it is sent (10–28800), in place of the state's.
    public var staleAfterSeconds: Int?
    /// The alert's sound: `default` or a sound file of the app.
    public var sound: String?
    public var alert: Alert?

    public init(dismissal: Dismissal? = nil, relevanceScore: Double? = nil, staleAfterSeconds: Int? = nil, sound: String? = nil, alert: Alert? = nil) {
        self.dismissal = dismissal
        self.relevanceScore = relevanceScore
        self.staleAfterSeconds = staleAfterSeconds
        self.sound = sound
        self.alert = alert
    }

    /// The most an ended activity may stay after its end (Apple's rule).
    public static let maximumDismissal: TimeInterval = 4 * 3_600

    /// Apple's rules for each member, for an event of `kind` that occurred at `occurredAt`.
    public func validate(kind: ActivityEventKind, occurredAt: Date) throws(MessageValidationError) {
        if let dismissal {
            guard kind == .end else { throw MessageValidationError(field: "presentation.dismissal", problem: "only an end is dismissed") }
            if case .at(let date) = dismissal {
                let after = date.timeIntervalSince(occurredAt)
                guard after >= 0, after <= Self.maximumDismissal else {
                    throw MessageValidationError(
                        field: "presentation.dismissal", problem: "must be \"immediate\" or a time within 4 hours after the event (iOS keeps an ended activity 4 hours at most)")
                }
            }
        }
        if let relevanceScore, !(relevanceScore.isFinite && (0...100).contains(relevanceScore)) {
            throw MessageValidationError(field: "presentation.relevanceScore", problem: "must be 0 to 100")
        }
        if let staleAfterSeconds, !(10...8 * 3_600).contains(staleAfterSeconds) {
            throw MessageValidationError(field: "presentation.staleAfterSeconds", problem: "must be 10 to 28800")
        }
        if let sound, !(1...256).contains(sound.utf8.count) || sound.contains("/") {
            throw MessageValidationError(field: "presentation.sound", problem: "must be default or a sound file's name (1-256 bytes, no /)")
        }
        try alert?.validate()
    }
}

extension EventPresentation: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let staleAfterSeconds = members.optional("staleAfterSeconds", members.int),
            let sound = members.optional("sound", members.string)
        else { return nil }
        var relevance: Double?
        switch members.members["relevanceScore"] {
        case nil, .null?: relevance = nil
        case .integer(let value)?: relevance = Double(value)
        case .number(let value)?: relevance = value
        default: return nil
        }
        var dismissal: Dismissal?
        if !members.isAbsent("dismissal") {
            guard let given = members.string("dismissal").flatMap(Dismissal.init(text:)) else { return nil }
            dismissal = given
        }
        var alert: Alert?
        if !members.isAbsent("alert") {
            guard let given = members.members["alert"].flatMap(Alert.init(json:)) else { return nil }
            alert = given
        }
        self.init(dismissal: dismissal, relevanceScore: relevance, staleAfterSeconds: staleAfterSeconds, sound: sound, alert: alert)
    }
}

extension EventPresentation.Alert: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let title = members.optional("title", members.string), let body = members.optional("body", members.string),
            let titleLocKey = members.optional("titleLocKey", members.string), let titleLocArgs = members.optional("titleLocArgs", members.strings),
            let bodyLocKey = members.optional("bodyLocKey", members.string), let bodyLocArgs = members.optional("bodyLocArgs", members.strings)
        else { return nil }
        var translations: [String: Translation]?
        if !members.isAbsent("translations") {
            guard let given = members.object("translations") else { return nil }
            var read: [String: Translation] = [:]
            for (tag, value) in given {
                guard let translation = JSONMembers(value), let title = translation.string("title"),
                    let body = translation.optional("body", translation.string)
                else { return nil }
                read[tag] = Translation(title: title, body: body)
            }
            translations = read
        }
        self.init(
            title: title, body: body, titleLocKey: titleLocKey, titleLocArgs: titleLocArgs, bodyLocKey: bodyLocKey, bodyLocArgs: bodyLocArgs,
            translations: translations)
    }
}
