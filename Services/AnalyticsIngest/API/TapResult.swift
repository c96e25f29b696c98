import Foundation
import IsletMessages

/// What became of one tap.
public struct TapResult: Codable, Sendable, Equatable {
    public enum Verdict: String, Codable, Sendable {
        /// Verified and acknowledged on `islet.clicks.v1`.
        case accepted
        /// The same tap (same URL, same tap time) was already accepted: counted once.
        case duplicate
        /// Failed a check; recorded on `islet.clicks-rejected.v1`. Do not retry.
        case rejected
        /// Kafka did not acknowledge in time (or the same tap is being recorded right now): retry.
        case unavailable
    }

    public var verdict: Verdict
    /// The tap's deterministic id (accepted and duplicate taps).
    public var clickId: String?
    /// Why it was rejected (a `ClickRejectionReason`), or `unavailable`.
    public var error: String?
    /// The input field at fault: `url`, `tappedAt`, `appVersion` or `osVersion`.
    public var field: String?
    /// A human-readable explanation.
    public var reason: String?

    public init(verdict: Verdict, clickId: String? = nil, error: String? = nil, field: String? = nil, reason: String? = nil) {
        self.verdict = verdict
        self.clickId = clickId
        self.error = error
        self.field = field
        self.reason = reason
    }
}

/// The answer to a single tap is written on every request: by its own writer, the encoder's bytes.
extension TapResult: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("clickId", clickId, into: &out)
        object.string("error", error, into: &out)
        object.string("field", field, into: &out)
        object.string("reason", reason, into: &out)
        object.string("verdict", verdict.rawValue, into: &out)
        object.end(into: &out)
    }
}
