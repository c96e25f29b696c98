import Foundation
import IsletMessages

/// APNs's answer: the status, the `reason` of an error body, a 410's `timestamp`, the `apns-id`
/// and, when APNs sends one, the `apns-unique-id`.
public struct APNsAnswer: Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var timestamp: Date?
    public var apnsID: String?
    /// `apns-unique-id`: the key of the delivery in Apple's Push Notifications Console.
    public var uniqueID: String?

    public init(status: Int, reason: String? = nil, timestamp: Date? = nil, apnsID: String? = nil, uniqueID: String? = nil) {
        self.status = status
        self.reason = reason
        self.timestamp = timestamp
        self.apnsID = apnsID
        self.uniqueID = uniqueID
    }
}

extension APNsAnswer {
    /// The answer read from a stream: its `:status`, its `apns-id`, and for an error the JSON body's
    /// `reason` and (with a 410) `timestamp`, milliseconds since 1970. A body that is not such JSON
    /// leaves both `nil`; the status alone then decides (``APNsAction/forAnswer(status:reason:)``).
    /// A timestamp outside the years an outcome can carry (``IsletDate/range``) is left out: the
    /// outcome would be refused by every reader, and `Int64.max` stopped the dispatcher.
    package init(status: Int, apnsID: String?, uniqueID: String? = nil, body: [UInt8]) {
        self.init(status: status, apnsID: apnsID, uniqueID: uniqueID.flatMap(Self.plausibleUniqueID))
        guard status != 200, !body.isEmpty, let error = try? JSONDecoder().decode(ErrorBody.self, from: Data(body)) else { return }
        reason = error.reason
        timestamp = error.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1_000) }.flatMap { IsletDate.range.contains($0) ? $0 : nil }
    }

    /// An `apns-unique-id` as it is kept: APNs's are UUIDs; anything longer than 64 characters or
    /// with characters other than letters, digits and `-` is not kept (it would reach the outcome,
    /// the lookup and logs).
    static func plausibleUniqueID(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= 64,
            text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D })
        else { return nil }
        return text
    }

    private struct ErrorBody: Decodable {
        var reason: String?
        var timestamp: Int64?
    }

    /// The answer as a push outcome records it.
    package var response: PushOutcome.APNsResponse {
        PushOutcome.APNsResponse(status: status, reason: reason, apnsId: apnsID, timestamp: timestamp, uniqueId: uniqueID)
    }
}
