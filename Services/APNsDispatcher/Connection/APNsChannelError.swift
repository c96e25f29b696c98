import IsletMessages

/// APNs refused a channel management request: its status and reason (`BadChannelId`,
/// `ChannelNotRegistered`, `CannotCreateChannelConfig` at the 10,000 channels of an app, …).
public struct APNsChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: Int
    public var reason: String?
    public var requestID: String?

    public init(status: Int, reason: String?, requestID: String? = nil) {
        self.status = status
        self.reason = reason
        self.requestID = requestID
    }

    /// The channel is not there (deleted, never made, or another app's): a delete of it is done.
    public var channelIsGone: Bool { PushOutcome.APNsResponse.saysChannelIsGone(status: status, reason: reason) || status == 404 }

    public var description: String { "APNs answered \(status) \(reason ?? "without a reason")" }
}
