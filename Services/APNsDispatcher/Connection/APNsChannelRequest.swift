import Foundation
import NIOCore

/// One channel management request (iOS 18 broadcast), to
/// `api-manage-broadcast[.sandbox].push.apple.com`: make a channel, read one, delete one, list an
/// app's channels.
public struct APNsChannelRequest: Sendable {
    public var method: String
    public var path: String
    /// `apns-channel-id`: the channel read or deleted.
    public var channelID: String?
    public var body: ByteBuffer?
    /// `apns-request-id`: names the request in APNs's answer and logs.
    public var requestID: String

    /// The app whose channels it manages (from its path, `/1/apps/<bundle id>/…`).
    public var bundleID: String {
        let parts = path.split(separator: "/")
        return parts.count > 2 ? String(parts[2]) : ""
    }

    public static func create(bundleID: String, storagePolicy: APNsStoragePolicy, requestID: String = UUID().uuidString.lowercased()) -> Self {
        let body = #"{"message-storage-policy":\#(storagePolicy.rawValue),"push-type":"LiveActivity"}"#
        return Self(method: "POST", path: "/1/apps/\(bundleID)/channels", channelID: nil, body: ByteBuffer(string: body), requestID: requestID)
    }

    public static func read(_ channelID: String, bundleID: String, requestID: String = UUID().uuidString.lowercased()) -> Self {
        Self(method: "GET", path: "/1/apps/\(bundleID)/channels", channelID: channelID, body: nil, requestID: requestID)
    }

    public static func delete(_ channelID: String, bundleID: String, requestID: String = UUID().uuidString.lowercased()) -> Self {
        Self(method: "DELETE", path: "/1/apps/\(bundleID)/channels", channelID: channelID, body: nil, requestID: requestID)
    }

    public static func list(bundleID: String, requestID: String = UUID().uuidString.lowercased()) -> Self {
        Self(method: "GET", path: "/1/apps/\(bundleID)/all-channels", channelID: nil, body: nil, requestID: requestID)
    }
}
