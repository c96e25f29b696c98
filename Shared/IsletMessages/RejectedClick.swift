import Foundation

/// A tap that failed verification, with the raw input and why, on `islet.clicks-rejected.v1`.
///
/// Kept so that forged or broken links can be investigated; never counted as a click. The
/// topic has no key. Written by analytics-ingest.
public struct RejectedClick: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.clicksRejected

    /// The most of the raw URL kept, in UTF-8 bytes; the initializer cuts longer input.
    public static let maximumUrlBytes = 2048

    public var schemaVersion: Int
    /// Why the tap was rejected.
    public var reason: ClickRejectionReason
    /// A human-readable explanation naming the parameter or check at fault.
    public var detail: String
    /// The URL as received, cut to ``maximumUrlBytes`` UTF-8 bytes (on a character boundary).
    public var url: String
    /// When the user tapped, by the device's clock, if the app said.
    public var tappedAt: Date?
    /// The app's version, if the app said.
    public var appVersion: String?
    /// The iOS version, if the app said.
    public var osVersion: String?
    /// The client's address as analytics-ingest's rate limiter saw it: the TCP peer, or a trusted
    /// proxy's `X-Forwarded-For` entry.
    public var clientId: String?
    /// When analytics-ingest received the tap.
    public var receivedAt: Date

    public init(
        reason: ClickRejectionReason, detail: String, url: String, tappedAt: Date? = nil, appVersion: String? = nil,
        osVersion: String? = nil, clientId: String? = nil, receivedAt: Date, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.reason = reason
        self.detail = detail
        self.url = Self.truncated(url, toUTF8Bytes: Self.maximumUrlBytes)
        self.tappedAt = tappedAt
        self.appVersion = appVersion
        self.osVersion = osVersion
        self.clientId = clientId
        self.receivedAt = receivedAt
    }

    /// No key: rejected taps are spread over all partitions.
    public var key: String? { nil }

    /// The longest prefix of whole characters that fits in `limit` UTF-8 bytes.
    package static func truncated(_ text: String, toUTF8Bytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var bytes = 0
        var characters = 0
        for character in text {
            bytes += character.utf8.count
            guard bytes <= limit else { break }
            characters += 1
        }
        return String(text.prefix(characters))
    }
}
