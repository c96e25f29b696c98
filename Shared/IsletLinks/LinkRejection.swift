import IsletMessages

/// Why a link did not verify: the reason analytics-ingest reports, and a detail naming the
/// parameter or check at fault.
public struct LinkRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: ClickRejectionReason
    public var detail: String

    public init(_ reason: ClickRejectionReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(reason.rawValue): \(detail)" }
}
