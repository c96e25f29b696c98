import Foundation
import IsletMessages

// content-service's policies, in one place: what goes into a payload (ContentPolicy) and how
// the freshness monitor watches what it sent (FreshnessPolicy).

public struct ContentPolicy: Sendable {
    public enum Dismissal: Sendable, Equatable {
        /// Leave the ended activity on the Lock Screen as iOS decides (up to 4 hours).
        case system
        /// Remove it at once.
        case immediate
        /// Remove it this long after the end (at most 4 hours).
        case after(Duration)
    }

    /// At most this many alerting pushes per activity in ``alertWindow`` (reminder fatigue).
    public var maximumAlerts = 3
    public var alertWindow: Duration = .seconds(3_600)
    public var dismissal: Dismissal = .after(.seconds(900))

    public init() {}

    /// The `aps.dismissal-date` of an end sent at `now` (`nil`: iOS decides).
    public func dismissalDate(now: Date) -> Int64? {
        switch dismissal {
        case .system: nil
        case .immediate: Int64(now.timeIntervalSince1970.rounded(.down)) - 1
        case .after(let delay): Int64(now.addingTimeInterval(min(delay / .seconds(1), 4 * 3_600)).timeIntervalSince1970.rounded(.up))
        }
    }

    /// Priority 10 for what the user must see now, 5 for the rest.
    public func priority(for urgency: Urgency) -> Int { urgency == .routine ? 5 : 10 }
}
