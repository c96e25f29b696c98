import Foundation
import IsletMessages

/// APNs's answer: the status, the `reason` of an error body, a 410's `timestamp`, the `apns-id`.
public struct APNsAnswer: Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var timestamp: Date?
    public var apnsID: String?

    public init(status: Int, reason: String? = nil, timestamp: Date? = nil, apnsID: String? = nil) {
        self.status = status
        self.reason = reason
        self.timestamp = timestamp
        self.apnsID = apnsID
    }
}

extension APNsAnswer {
    /// The answer read from a stream: its `:status`, its `apns-id`, and for an error the JSON body's
    /// `reason` and (with a 410) `timestamp`, milliseconds since 1970. A body that is not such JSON
    /// leaves both `nil`; the status alone then decides (``APNsAction/forAnswer(status:reason:)``).
    /// A timestamp outside the years an outcome can carry (``IsletDate/range``) is left out: the
    /// outcome would be refused by every reader, and `Int64.max` stopped the dispatcher.
    package init(status: Int, apnsID: String?, body: [UInt8]) {
        self.init(status: status, apnsID: apnsID)
        guard status != 200, !body.isEmpty, let error = try? JSONDecoder().decode(ErrorBody.self, from: Data(body)) else { return }
        reason = error.reason
        timestamp = error.timestamp.map { Date(timeIntervalSince1970: Double($0) / 1_000) }.flatMap { IsletDate.range.contains($0) ? $0 : nil }
    }

    private struct ErrorBody: Decodable {
        var reason: String?
        var timestamp: Int64?
    }

    /// The answer as a push outcome records it.
    package var response: PushOutcome.APNsResponse {
        PushOutcome.APNsResponse(status: status, reason: reason, apnsId: apnsID, timestamp: timestamp)
    }
}
