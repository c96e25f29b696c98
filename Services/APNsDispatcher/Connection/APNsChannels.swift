import Foundation
import IsletMessages
import NIOCore

/// What a broadcast channel keeps of the messages sent on it (`message-storage-policy`, fixed when
/// the channel is made).
public enum APNsStoragePolicy: Int, Sendable, Codable, Equatable {
    /// Nothing is stored: a phone offline when a broadcast goes out misses it. APNs allows more
    /// broadcasts on such a channel; every broadcast on it must have `apns-expiration` 0. Scores.
    case noMessageStored = 0
    /// The most recent message is stored (at most 8 hours) for phones that were offline.
    case mostRecentMessageStored = 1
}

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
    public var channelIsGone: Bool { status == 400 && (reason == "ChannelNotRegistered" || reason == "BadChannelId") || status == 404 }

    public var description: String { "APNs answered \(status) \(reason ?? "without a reason")" }
}

extension APNsClient {
    /// Makes a broadcast channel for the app; returns its id (random base64: no size assumed).
    public func createChannel(bundleID: String, storagePolicy: APNsStoragePolicy, teamID: String, environment: APNsEnvironment) async throws -> String {
        let reply = try await manage(.create(bundleID: bundleID, storagePolicy: storagePolicy), teamID: teamID, environment: environment, expecting: 201)
        guard let id = reply.channelID, !id.isEmpty else {
            throw APNsChannelError(status: reply.status, reason: "201 without apns-channel-id", requestID: reply.requestID)
        }
        return id
    }

    /// The storage policy of the app's channel (whether it is there: ``APNsChannelError/channelIsGone`` if not).
    public func channelPolicy(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws -> APNsStoragePolicy {
        let reply = try await manage(.read(channelID, bundleID: bundleID), teamID: teamID, environment: environment, expecting: 200)
        guard case .object(let fields)? = try? IsletJSON.decodeValue(JSONValue.self, from: reply.body),
            case .integer(let value)? = fields["message-storage-policy"], let policy = APNsStoragePolicy(rawValue: Int(value))
        else { throw APNsChannelError(status: reply.status, reason: "200 without a message-storage-policy", requestID: reply.requestID) }
        return policy
    }

    /// Deletes the app's channel, irreversibly (messages stored on it may still be delivered).
    public func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws {
        _ = try await manage(.delete(channelID, bundleID: bundleID), teamID: teamID, environment: environment, expecting: 204)
    }

    /// The ids of the app's channels.
    public func channels(bundleID: String, teamID: String, environment: APNsEnvironment) async throws -> [String] {
        let reply = try await manage(.list(bundleID: bundleID), teamID: teamID, environment: environment, expecting: 200)
        guard case .object(let fields)? = try? IsletJSON.decodeValue(JSONValue.self, from: reply.body), case .array(let ids)? = fields["channels"] else {
            throw APNsChannelError(status: reply.status, reason: "200 without a channels list", requestID: reply.requestID)
        }
        return ids.compactMap { if case .string(let id) = $0 { id } else { nil } }
    }

    /// Sends a management request; an answer other than `status` is an ``APNsChannelError``.
    private func manage(_ request: APNsChannelRequest, teamID: String, environment: APNsEnvironment, expecting status: Int) async throws -> APNsReply {
        let reply = try await exchange(request, teamID: teamID, environment: environment)
        guard reply.status == status else {
            let answer = APNsAnswer(status: reply.status, apnsID: reply.requestID, body: reply.body)
            throw APNsChannelError(status: reply.status, reason: answer.reason, requestID: reply.requestID)
        }
        return reply
    }
}
