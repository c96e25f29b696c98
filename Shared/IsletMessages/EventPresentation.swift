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

    /// The texts of this event's alert, in the user's language, in place of the state's (whether
    /// it alerts is still the alert policy's: the urgency, a change of state, the fatigue limit).
    public struct Alert: Codable, Sendable, Hashable {
        public var title: String
        public var body: String?

        public init(title: String, body: String? = nil) {
            self.title = title
            self.body = body
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
        if let alert {
            guard (1...256).contains(alert.title.utf8.count) else {
                throw MessageValidationError(field: "presentation.alert.title", problem: "must be 1-256 bytes")
            }
            if let body = alert.body, body.utf8.count > 1_024 {
                throw MessageValidationError(field: "presentation.alert.body", problem: "must be at most 1024 bytes")
            }
        }
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
            guard let given = members.members["alert"].flatMap(JSONMembers.init), let title = given.string("title"),
                let body = given.optional("body", given.string)
            else { return nil }
            alert = Alert(title: title, body: body)
        }
        self.init(dismissal: dismissal, relevanceScore: relevance, staleAfterSeconds: staleAfterSeconds, sound: sound, alert: alert)
    }
}
