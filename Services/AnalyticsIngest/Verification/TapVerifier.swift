import Crypto
import Foundation
import IsletLinks
import IsletMessages

/// The checks of one tap, without side effects: the body's fields, then the link with the shared
/// codec (``DeepLinkCodec/verify(_:keyring:tappedAt:receivedAt:)``: parameters, key id, signature
/// compared in constant time, issued at most 12 hours before the tap reached Islet). A click's
/// `app` is the one its signed link names; a link signed before links named their app gives none.
public struct TapVerifier: Sendable {
    /// What the checks found.
    public enum Outcome: Sendable {
        /// A verified tap, ready for `islet.clicks.v1`, and the identity of its link
        /// (``VerifiedLink/identity``).
        case valid(ClickEvent, link: String)
        /// A failed check, ready for `islet.clicks-rejected.v1`, and the input field at fault.
        case invalid(RejectedClick, field: String)
    }

    /// Longest `appVersion` / `osVersion` accepted, in UTF-8 bytes.
    public static let maximumVersionBytes = 64

    public let keyring: LinkKeyring
    /// A tap older than this when it arrives is `expired`.
    public let maxTapAge: TimeInterval

    public init(keyring: LinkKeyring, maxTapAge: Duration) {
        self.keyring = keyring
        self.maxTapAge = TimeInterval(maxTapAge.components.seconds) + TimeInterval(maxTapAge.components.attoseconds) / 1e18
    }

    public func check(_ input: TapInput, receivedAt: Date, clientId: String?) -> Outcome {
        let url = input.url ?? ""
        let tappedAt = input.tappedAt.flatMap(IsletDate.parse).map(IsletDate.truncatedToMilliseconds)
        func reject(_ reason: ClickRejectionReason, _ field: String, _ detail: String) -> Outcome {
            .invalid(
                RejectedClick(
                    reason: reason, detail: detail, url: url, tappedAt: tappedAt, appVersion: input.appVersion.map { Self.cut($0) },
                    osVersion: input.osVersion.map { Self.cut($0) }, clientId: clientId, receivedAt: receivedAt),
                field: field)
        }
        guard input.url != nil else { return reject(.malformedUrl, "url", "url is missing") }
        guard input.tappedAt != nil else { return reject(.invalidParameter, "tappedAt", "tappedAt is missing") }
        guard let tappedAt else { return reject(.invalidParameter, "tappedAt", "tappedAt is not an ISO 8601 date") }
        for (name, value) in [("appVersion", input.appVersion), ("osVersion", input.osVersion)] {
            guard let value else { return reject(.invalidParameter, name, "\(name) is missing") }
            guard Self.isVersion(value) else {
                return reject(.invalidParameter, name, "\(name) must be 1-\(Self.maximumVersionBytes) bytes of printable text")
            }
        }
        guard tappedAt <= receivedAt.addingTimeInterval(DeepLinkCodec.clockSkew) else {
            return reject(.invalidParameter, "tappedAt", "tappedAt is later than the time the tap was received")
        }
        guard receivedAt.timeIntervalSince(tappedAt) <= maxTapAge else {
            return reject(.expired, "tappedAt", "the tap is older than \(Int(maxTapAge)) s when it arrived")
        }
        switch DeepLinkCodec.verify(url, keyring: keyring, tappedAt: tappedAt, receivedAt: receivedAt) {
        case .failure(let rejection):
            return reject(rejection.reason, "url", rejection.detail)
        case .success(let link):
            return .valid(
                ClickEvent(
                    clickId: Self.clickId(link: link, tappedAt: tappedAt), activityId: link.target.activityId,
                    attributesType: link.target.attributesType, surface: link.target.surface, element: link.target.element,
                    contentSequence: link.target.contentSequence, app: link.target.app, appVersion: input.appVersion!, osVersion: input.osVersion!,
                    keyId: link.keyId, issuedAt: link.issuedAt, tappedAt: tappedAt, receivedAt: receivedAt),
                link: link.identity)
        }
    }

    /// The tap's id: the first 16 bytes of SHA-256 over the link's identity (its key id and
    /// signature: the same for every spelling of the link) and the second of the tap, hex.
    /// Deterministic, so a tap sent twice — respelled or not, to this instance or any other, now or
    /// after a restart — has the same id, and readers of `islet.clicks.v1` can deduplicate; a
    /// `tappedAt` moved by less than a second is the same tap.
    public static func clickId(link: VerifiedLink, tappedAt: Date) -> String {
        let second = Int64(tappedAt.timeIntervalSince1970.rounded(.down))
        let digest = SHA256.hash(data: Array("islet-click-v2\n\(link.identity)\n\(second)".utf8))
        return DeepLinkCodec.hex(digest.prefix(16))
    }

    /// The id a tap of `url` at `tappedAt`, received at `receivedAt`, gets when its link verifies
    /// with `keyring` (`nil` when it does not). For tests and tools that predict ids.
    public static func clickId(url: String, tappedAt: Date, keyring: LinkKeyring, receivedAt: Date) -> String? {
        guard case .success(let link) = DeepLinkCodec.verify(url, keyring: keyring, tappedAt: tappedAt, receivedAt: receivedAt) else { return nil }
        return clickId(link: link, tappedAt: tappedAt)
    }

    static func isVersion(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= maximumVersionBytes && text.unicodeScalars.allSatisfy { !$0.properties.isWhitespace || $0 == " " }
            && !text.unicodeScalars.contains { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format }
    }

    /// Versions kept on a rejected record are cut like its URL: to at most ``maximumVersionBytes``
    /// UTF-8 bytes, on a character boundary (a cut to 64 characters kept up to four times that, and
    /// a single character can be any length).
    static func cut(_ text: String) -> String {
        RejectedClick.truncated(text, toUTF8Bytes: maximumVersionBytes)
    }
}
