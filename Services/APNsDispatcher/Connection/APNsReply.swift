/// What a stream answered: its `:status`, the headers APNs names its answers with, and its body
/// (at most ``maximumPushBody`` or ``maximumManagementBody`` bytes are kept).
struct APNsReply: Sendable {
    var status: Int
    /// `apns-id` (token path) or `apns-request-id` (broadcast API).
    var requestID: String?
    /// `apns-channel-id` (channel management).
    var channelID: String?
    /// `apns-unique-id`: the key of the delivery in Apple's Push Notifications Console (APNs sends
    /// it in the development environment and with a broadcast's 200).
    var uniqueID: String?
    var body: [UInt8]

    /// What a push's answer body may be: an error's JSON (`{"reason":…,"timestamp":…}`). A
    /// server that sends more is not kept in memory for it.
    static let maximumPushBody = 4 << 10
    /// What a channel management answer may be: the list of an app's channels (10,000 ids of some
    /// 30 bytes).
    static let maximumManagementBody = 1 << 20
}
