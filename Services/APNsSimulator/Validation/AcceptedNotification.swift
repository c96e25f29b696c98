import Foundation
import IsletMessages

/// A Live Activity push (or a WidgetKit push, `pushType` `widgets`) the simulator accepted: what
/// the phone would have received.
public struct AcceptedNotification: Sendable, Codable, Equatable {
    /// The device token (lowercase hex).
    public var token: String
    public var apnsID: String
    /// The `apns-unique-id` it was answered with: the key of its entry in the delivery log, as Apple's
    /// Push Notifications Console keeps it.
    public var uniqueID: String
    public var topic: String
    public var priority: Int
    public var pushType: String
    public var expiration: Int64?
    public var collapseID: String?
    /// `aps.event`: start, update or end; ``widgetEvent`` for a widget push.
    public var event: String
    /// `aps.timestamp`.
    public var timestamp: Int64
    /// `aps.input-push-channel` of a start: the broadcast channel the new activity subscribes to.
    public var inputPushChannel: String?
    /// The whole body, as sent.
    public var payload: String
    public var payloadBytes: Int
    public var receivedAt: Date
    /// Which connection and stream it came on (for GOAWAY and retry checks).
    public var connection: Int
    public var stream: Int

    /// The `event` of a widget push (which has none: it says only `content-changed`).
    public static let widgetEvent = "content-changed"
}
