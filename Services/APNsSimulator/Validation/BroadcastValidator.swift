import Foundation
import IsletMessages

/// Validates the broadcast provider API (iOS 18) like APNs: channel management on
/// `/1/apps/<bundle>/…` and broadcast sends on `/4/broadcasts/apps/<bundle>`, with their error
/// reasons (../shared/reference/apple-rules.md, "Broadcast").
public enum BroadcastValidator {
    /// A broadcast payload's limit (the token path's is 4,096).
    public static let maximumPayloadBytes = 5_120
    /// Channels per app and environment.
    public static let maximumChannels = 10_000

    /// What a request of the broadcast API asks.
    public enum Route: Sendable, Equatable {
        /// `POST /4/broadcasts/apps/<bundle>`.
        case broadcast(bundleId: String)
        /// `POST /1/apps/<bundle>/channels`.
        case create(bundleId: String)
        /// `GET /1/apps/<bundle>/channels` with `apns-channel-id`.
        case read(bundleId: String)
        /// `DELETE /1/apps/<bundle>/channels` with `apns-channel-id`.
        case delete(bundleId: String)
        /// `GET /1/apps/<bundle>/all-channels`.
        case list(bundleId: String)

        public var bundleId: String {
            switch self {
            case .broadcast(let bundle), .create(let bundle), .read(let bundle), .delete(let bundle), .list(let bundle): bundle
            }
        }
    }

    /// Whether the path is the broadcast API's (otherwise the token path's rules apply).
    public static func isBroadcastAPI(_ path: String) -> Bool { path.hasPrefix("/4/broadcasts/") || path.hasPrefix("/1/apps/") }

    /// The route of a request of the broadcast API, or APNs's refusal of its request line.
    public static func route(_ request: NotificationValidator.Request) -> Result<Route, APNsRejection> {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "/4/broadcasts/apps/<bundle>" and "/1/apps/<bundle>/channels" split with a leading "".
        if parts.count == 5, parts[1] == "4", parts[2] == "broadcasts", parts[3] == "apps" {
            guard request.method == "POST" else { return .failure(APNsRejection(405, "MethodNotAllowed")) }
            return bundle(parts[4]).map { .broadcast(bundleId: $0) }
        }
        guard parts.count == 5, parts[1] == "1", parts[2] == "apps" else { return .failure(APNsRejection(404, "BadPath")) }
        return bundle(parts[3]).flatMap { bundle -> Result<Route, APNsRejection> in
            switch (request.method, parts[4]) {
            case ("POST", "channels"): .success(.create(bundleId: bundle))
            case ("GET", "channels"): .success(.read(bundleId: bundle))
            case ("DELETE", "channels"): .success(.delete(bundleId: bundle))
            case ("GET", "all-channels"): .success(.list(bundleId: bundle))
            case (_, "channels"), (_, "all-channels"): .failure(APNsRejection(405, "MethodNotAllowed"))
            default: .failure(APNsRejection(404, "BadPath"))
            }
        }
    }

    /// The app's bundle id as the path names it: a bare bundle id (a topic's suffix is refused).
    private static func bundle(_ text: String) -> Result<String, APNsRejection> {
        guard !text.isEmpty, !text.contains(".push-type."), text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(APNsRejection(400, "TopicDisallowed"))
        }
        return .success(text)
    }

    /// The channel id of `apns-channel-id`: present, and base64 as APNs makes them.
    public static func channelId(_ headers: [String: String]) -> Result<String, APNsRejection> {
        guard let id = headers["apns-channel-id"], !id.isEmpty else { return .failure(APNsRejection(400, "MissingChannelId")) }
        guard id.utf8.count <= 256, Data(base64Encoded: id) != nil else { return .failure(APNsRejection(400, "BadChannelId")) }
        return .success(id)
    }

    /// The storage policy a create request asks for, or its refusal: a JSON object with
    /// `"push-type": "LiveActivity"` and `"message-storage-policy"` 0 or 1.
    public static func creation(_ body: [UInt8]) -> Result<Int, APNsRejection> {
        guard case .object(let fields)? = try? IsletJSON.decodeValue(JSONValue.self, from: body) else {
            return .failure(APNsRejection(400, "BadRequestParams"))
        }
        guard let pushType = fields["push-type"] else { return .failure(APNsRejection(400, "MissingPushType")) }
        guard pushType == .string("LiveActivity") else { return .failure(APNsRejection(400, "InvalidPushType")) }
        guard case .integer(let policy)? = fields["message-storage-policy"], policy == 0 || policy == 1 else {
            return .failure(APNsRejection(400, "BadRequestParams"))
        }
        return .success(Int(policy))
    }

    /// Checks a broadcast's headers and payload against its channel (looked up by the caller).
    public static func validate(
        _ request: NotificationValidator.Request, channel: SimulatedChannel, requestId: String, now: Date, connection: Int
    ) -> Result<AcceptedBroadcast, APNsRejection> {
        let headers = request.headers
        guard let pushType = headers["apns-push-type"] else { return .failure(APNsRejection(400, "MissingPushType")) }
        guard pushType == "liveactivity" else { return .failure(APNsRejection(400, "InvalidPushType")) }
        guard let priorityText = headers["apns-priority"], let priority = Int(priorityText), [1, 5, 10].contains(priority) else {
            return .failure(APNsRejection(400, "BadPriority"))
        }
        // Required on every broadcast (APNs, 2025): a broadcast without it is refused.
        guard let text = headers["apns-expiration"], let expiration = Int64(text), expiration >= 0 else {
            return .failure(APNsRejection(400, "BadExpirationDate"))
        }
        // A channel that stores no message takes only pushes that are not to be stored.
        if channel.storagePolicy == 0 && expiration != 0 { return .failure(APNsRejection(400, "BadExpirationDate")) }
        guard !request.body.isEmpty else { return .failure(APNsRejection(400, "BadRequestPayload")) }
        guard request.body.count <= maximumPayloadBytes else { return .failure(APNsRejection(413, "PayloadTooLarge")) }
        guard let aps = (try? IsletJSON.decodeValue(NotificationValidator.PayloadShape.self, from: request.body))?.aps,
            let event = aps.event, event == "update" || event == "end", let timestamp = aps.timestamp, aps.hasContentState
        else { return .failure(APNsRejection(400, "BadRequestPayload")) }
        return .success(
            AcceptedBroadcast(
                channelId: channel.id, bundleId: channel.bundleId, requestId: requestId, uniqueID: UUID().uuidString.lowercased(), priority: priority, expiration: expiration, event: event,
                timestamp: timestamp, payload: String(decoding: request.body, as: UTF8.self), payloadBytes: request.body.count,
                subscribers: channel.subscribers, receivedAt: now, connection: connection))
    }
}
