import NIOCore

/// One push to APNs: to a device token (`POST /3/device/<token>`), or a broadcast to every
/// activity subscribed to a channel (`POST /4/broadcasts/apps/<bundle>`, iOS 18).
public struct APNsPush: Sendable {
    /// Where a push goes.
    public enum Destination: Sendable, Equatable {
        /// One activity's (or a push-to-start) device token; `topic` is `apns-topic`,
        /// `<bundle id>.push-type.liveactivity` (a widget push's: `<bundle id>.push-type.widgets`).
        case device(token: String, topic: String)
        /// A broadcast channel of the app: one push for all its subscribers.
        case channel(id: String, bundleID: String)
    }

    public var destination: Destination
    /// 10 or 5 (a broadcast may also use 1).
    public var priority: Int
    /// `apns-id` on the token path, `apns-request-id` on a broadcast: the request id (so a retry
    /// is recognised as the same push).
    public var apnsID: String
    /// `apns-expiration`, epoch seconds; 0: one attempt, not stored (the only value a channel
    /// that stores no message takes).
    public var expiration: Int64
    public var payload: ByteBuffer

    /// `apns-push-type` on the token path: `liveactivity`, or `widgets` for a WidgetKit push
    /// (iOS 26), told by its topic's suffix.
    public var pushType: String {
        if case .device(_, let topic) = destination, topic.hasSuffix(Self.widgetsSuffix) { return "widgets" }
        return "liveactivity"
    }

    /// The suffix of a Live Activity push's topic.
    public static let liveActivitySuffix = ".push-type.liveactivity"
    /// The suffix of a WidgetKit push's topic.
    public static let widgetsSuffix = ".push-type.widgets"

    public init(destination: Destination, priority: Int, apnsID: String, expiration: Int64, payload: ByteBuffer) {
        self.destination = destination
        self.priority = priority
        self.apnsID = apnsID
        self.expiration = expiration
        self.payload = payload
    }

    public init(deviceToken: String, topic: String, priority: Int, apnsID: String, expiration: Int64, payload: ByteBuffer) {
        self.init(destination: .device(token: deviceToken, topic: topic), priority: priority, apnsID: apnsID, expiration: expiration, payload: payload)
    }

    /// The device token, or `nil` for a broadcast.
    public var deviceToken: String? {
        if case .device(let token, _) = destination { token } else { nil }
    }

    /// The app it is for: the topic's bundle id (`<bundle id>.push-type.liveactivity`), or the
    /// broadcast's.
    public var bundleID: String {
        switch destination {
        case .device(_, let topic):
            for suffix in [Self.liveActivitySuffix, Self.widgetsSuffix] where topic.hasSuffix(suffix) {
                return String(topic.dropLast(suffix.count))
            }
            return topic
        case .channel(_, let bundleID): return bundleID
        }
    }

    /// Whom it is for: the device token, or the channel id.
    public var recipient: String {
        switch destination {
        case .device(let token, _): token
        case .channel(let id, _): id
        }
    }
}
