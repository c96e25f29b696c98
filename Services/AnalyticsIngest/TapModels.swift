import Foundation
import IsletMessages

/// One tap as the app sends it: the URL the app was opened with, when the user tapped (the
/// device's clock, ISO 8601), and the app's and the system's versions.
///
/// ```json
/// {"url": "fooddelivery://order/42?isl_a=order-42&…&isl_sig=…", "tappedAt": "2026-11-22T10:15:30.123Z",
///  "appVersion": "5.2.0", "osVersion": "18.1"}
/// ```
///
/// Every field is optional in decoding so that a batch with one incomplete tap still gets a
/// verdict per tap: a missing field rejects that tap (`invalidParameter`, naming the field), not
/// the whole request. A field of the wrong JSON type makes the request `malformedBody`.
public struct TapInput: Codable, Sendable, Equatable {
    public var url: String?
    public var tappedAt: String?
    public var appVersion: String?
    public var osVersion: String?

    public init(url: String?, tappedAt: String?, appVersion: String?, osVersion: String?) {
        self.url = url
        self.tappedAt = tappedAt
        self.appVersion = appVersion
        self.osVersion = osVersion
    }
}

/// Up to ``IngestSettings/maxBatch`` taps the app buffered (offline, or to save radio time).
public struct TapBatch: Codable, Sendable, Equatable {
    public var taps: [TapInput]

    public init(taps: [TapInput]) {
        self.taps = taps
    }
}

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

/// The answer to a batch: a result per tap, in the order sent, and the counts.
public struct BatchResult: Codable, Sendable, Equatable {
    public var results: [TapResult]
    public var accepted: Int
    public var duplicates: Int
    public var rejected: Int
    public var unavailable: Int

    public init(results: [TapResult]) {
        self.results = results
        accepted = results.count { $0.verdict == .accepted }
        duplicates = results.count { $0.verdict == .duplicate }
        rejected = results.count { $0.verdict == .rejected }
        unavailable = results.count { $0.verdict == .unavailable }
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

extension TapInput: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let url = members.optional("url", members.string), let tappedAt = members.optional("tappedAt", members.string),
            let appVersion = members.optional("appVersion", members.string), let osVersion = members.optional("osVersion", members.string)
        else { return nil }
        self.init(url: url, tappedAt: tappedAt, appVersion: appVersion, osVersion: osVersion)
    }
}

extension TapBatch: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), case .array(let items)? = members.members["taps"] else { return nil }
        var taps: [TapInput] = []
        taps.reserveCapacity(items.count)
        for item in items {
            guard let tap = TapInput(json: item) else { return nil }
            taps.append(tap)
        }
        self.init(taps: taps)
    }
}
