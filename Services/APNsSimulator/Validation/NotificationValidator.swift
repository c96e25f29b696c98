import Foundation
import IsletMessages

/// Validates a provider API request like APNs does for Live Activity pushes (token path), and for
/// WidgetKit pushes (iOS 26: `apns-push-type: widgets`, topic `<bundle id>.push-type.widgets`,
/// body `{"aps":{"content-changed":true}}`).
public enum NotificationValidator {
    public static let maximumPayloadBytes = 4_096
    static let pathPrefix = "/3/device/"

    /// The parts of a request that matter.
    public struct Request: Sendable {
        public var method: String
        public var path: String
        /// Header names lowercased.
        public var headers: [String: String]
        public var body: [UInt8]

        public init(method: String, path: String, headers: [String: String], body: [UInt8]) {
            self.method = method
            self.path = path
            self.headers = headers
            self.body = body
        }
    }

    /// The device token of the path, or the rejection APNs gives for the request line.
    public static func token(of request: Request) -> Result<String, APNsRejection> {
        guard request.method == "POST" else { return .failure(APNsRejection(405, "MethodNotAllowed")) }
        guard request.path.hasPrefix(pathPrefix) else { return .failure(APNsRejection(404, "BadPath")) }
        let token = String(request.path.dropFirst(pathPrefix.count))
        guard !token.isEmpty else { return .failure(APNsRejection(400, "MissingDeviceToken")) }
        guard token.utf8.count.isMultiple(of: 2), (32...512).contains(token.utf8.count), token.utf8.allSatisfy(isHexDigit) else {
            return .failure(APNsRejection(400, "BadDeviceToken"))
        }
        return .success(token.lowercased())
    }

    /// Checks the headers and the payload (not the provider token, which the connection checks).
    public static func validate(_ request: Request, token: String, now: Date, connection: Int, stream: Int)
        -> Result<AcceptedNotification, APNsRejection>
    {
        let headers = request.headers
        guard let pushType = headers["apns-push-type"], pushType == "liveactivity" || pushType == "widgets" else {
            return .failure(APNsRejection(400, "InvalidPushType"))
        }
        guard let topic = headers["apns-topic"], !topic.isEmpty else { return .failure(APNsRejection(400, "MissingTopic")) }
        // Each push type has its topic: the app's bundle id with the type's suffix.
        let suffix = ".push-type." + pushType
        guard topic.hasSuffix(suffix), topic.count > suffix.count else {
            return .failure(APNsRejection(400, "BadTopic"))
        }
        guard let priorityText = headers["apns-priority"], let priority = Int(priorityText), priority == 5 || priority == 10 else {
            return .failure(APNsRejection(400, "BadPriority"))
        }
        var apnsID = UUID().uuidString.lowercased()
        if let given = headers["apns-id"] {
            guard UUID(uuidString: given) != nil else { return .failure(APNsRejection(400, "BadMessageId")) }
            apnsID = given.lowercased()
        }
        var expiration: Int64?
        if let text = headers["apns-expiration"] {
            guard let value = Int64(text), value >= 0 else { return .failure(APNsRejection(400, "BadExpirationDate")) }
            expiration = value
        }
        let collapseID = headers["apns-collapse-id"]
        if let collapseID, collapseID.utf8.count > 64 { return .failure(APNsRejection(400, "BadCollapseId")) }
        guard !request.body.isEmpty else { return .failure(APNsRejection(400, "PayloadEmpty")) }
        guard request.body.count <= maximumPayloadBytes else { return .failure(APNsRejection(413, "PayloadTooLarge")) }

        // The payload: JSON with an aps dictionary that ActivityKit can act on.
        guard let aps = (try? IsletJSON.decodeValue(PayloadShape.self, from: request.body))?.aps else {
            return .failure(APNsRejection(400, "BadPayload"))
        }
        if pushType == "widgets" {
            // WidgetKit reloads the widgets' timelines: `content-changed` is all it reads; a Live
            // Activity's fields have no place in it.
            guard aps.contentChanged == true, aps.event == nil, !aps.hasContentState, !aps.hasAlert else {
                return .failure(APNsRejection(400, "BadPayload"))
            }
            return .success(
                AcceptedNotification(
                    token: token, apnsID: apnsID, uniqueID: UUID().uuidString.lowercased(), topic: topic, priority: priority, pushType: pushType,
                    expiration: expiration, collapseID: collapseID, event: AcceptedNotification.widgetEvent, timestamp: 0, inputPushChannel: nil,
                    payload: String(decoding: request.body, as: UTF8.self), payloadBytes: request.body.count, receivedAt: now,
                    connection: connection, stream: stream))
        }
        guard let event = aps.event, ["start", "update", "end"].contains(event) else { return .failure(APNsRejection(400, "BadPayload")) }
        guard let timestamp = aps.timestamp, aps.hasContentState else { return .failure(APNsRejection(400, "BadPayload")) }
        if event == "start" {
            guard aps.hasAttributesType, aps.hasAttributes, aps.hasAlert else { return .failure(APNsRejection(400, "BadPayload")) }
        }
        return .success(
            AcceptedNotification(
                token: token, apnsID: apnsID, uniqueID: UUID().uuidString.lowercased(), topic: topic, priority: priority, pushType: "liveactivity", expiration: expiration,
                collapseID: collapseID, event: event, timestamp: timestamp, inputPushChannel: event == "start" ? aps.inputPushChannel : nil,
                payload: String(decoding: request.body, as: UTF8.self), payloadBytes: request.body.count, receivedAt: now,
                connection: connection, stream: stream))
    }

    /// What the check reads of a payload: the fields of its `aps` object, without building a tree
    /// of the whole document (most of the simulator's CPU when it did). The document is still
    /// parsed whole: malformed JSON anywhere is a BadPayload. A value it does not read is checked
    /// for syntax only (a number beyond a Double's range, a lone surrogate escape pass).
    struct PayloadShape: Decodable, Equatable {
        struct APS: Decodable, Equatable {
            enum Key: String, CodingKey {
                case event, timestamp, alert, attributes
                case contentState = "content-state"
                case attributesType = "attributes-type"
                case inputPushChannel = "input-push-channel"
                case contentChanged = "content-changed"
            }
            /// A string, else nil.
            var event: String?
            /// A whole number that fits 64 bits (as JSONValue reads `.integer`), else nil.
            var timestamp: Int64?
            /// An object, present.
            var hasContentState: Bool
            var hasAttributes: Bool
            /// A string, present.
            var hasAttributesType: Bool
            /// Any value, even null.
            var hasAlert: Bool
            /// A string, else nil.
            var inputPushChannel: String?
            /// A boolean, else nil (a widget push's `content-changed`).
            var contentChanged: Bool?

            init(from decoder: any Decoder) throws {
                let aps = try decoder.container(keyedBy: Key.self)
                event = try? aps.decodeIfPresent(String.self, forKey: .event)
                if let whole = try? aps.decodeIfPresent(Int64.self, forKey: .timestamp) {
                    timestamp = whole
                } else if let number = try? aps.decodeIfPresent(Double.self, forKey: .timestamp), number.rounded() == number {
                    timestamp = Int64(exactly: number)
                }
                hasContentState = (try? aps.nestedContainer(keyedBy: Key.self, forKey: .contentState)) != nil
                hasAttributes = (try? aps.nestedContainer(keyedBy: Key.self, forKey: .attributes)) != nil
                hasAttributesType = (try? aps.decodeIfPresent(String.self, forKey: .attributesType)) != nil
                hasAlert = aps.contains(.alert)
                inputPushChannel = try? aps.decodeIfPresent(String.self, forKey: .inputPushChannel)
                contentChanged = try? aps.decodeIfPresent(Bool.self, forKey: .contentChanged)
            }
        }
        /// An object.
        var aps: APS
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }
}

/// The same reading from a ``JSONValue`` that ``JSONReader`` made (``IsletJSON`` tries it first;
/// the decoder decides whatever the reader does not take).
extension NotificationValidator.PayloadShape: IsletJSONReadable {
    init?(json: JSONValue) {
        guard case .object(let root) = json, case .object(let aps)? = root["aps"] else { return nil }
        self.aps = APS(members: aps)
    }
}

extension NotificationValidator.PayloadShape.APS {
    init(members aps: [String: JSONValue]) {
        if case .string(let text)? = aps["event"] { event = text } else { event = nil }
        switch aps["timestamp"] {
        case .integer(let whole)?: timestamp = whole
        case .number(let number)? where number.rounded() == number: timestamp = Int64(exactly: number)
        default: timestamp = nil
        }
        if case .object? = aps["content-state"] { hasContentState = true } else { hasContentState = false }
        if case .object? = aps["attributes"] { hasAttributes = true } else { hasAttributes = false }
        if case .string? = aps["attributes-type"] { hasAttributesType = true } else { hasAttributesType = false }
        hasAlert = aps["alert"] != nil
        if case .string(let text)? = aps["input-push-channel"] { inputPushChannel = text } else { inputPushChannel = nil }
        if case .bool(let value)? = aps["content-changed"] { contentChanged = value } else { contentChanged = nil }
    }
}
