import Foundation
import IsletMessages

/// What APNs answers when it refuses a request: the HTTP status and the `reason` of the JSON body.
public struct APNsRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String
    /// With 410: since when the token is invalid (milliseconds since 1970 in the body).
    public var timestamp: Date?

    public init(_ status: Int, _ reason: String, timestamp: Date? = nil) {
        self.status = status
        self.reason = reason
        self.timestamp = timestamp
    }

    public var description: String { "\(status) \(reason)" }

    /// `{"reason": …}`, plus `"timestamp"` (ms) with 410, as APNs writes it.
    public var body: [UInt8] {
        var text = #"{"reason":"\#(reason)""#
        if let timestamp { text += #","timestamp":\#(Int64((timestamp.timeIntervalSince1970 * 1_000).rounded(.down)))"# }
        return Array((text + "}").utf8)
    }
}
