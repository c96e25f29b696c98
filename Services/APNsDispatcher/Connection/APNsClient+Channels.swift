import Foundation
import IsletMessages
import NIOCore

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
