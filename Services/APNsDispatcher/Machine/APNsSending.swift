import Foundation
import IsletMessages
import IsletTokens
import Logging
import Synchronization

/// Sends pushes to APNs. ``APNsClient`` in production; tests may script answers.
public protocol APNsSending: Sendable {
    func send(_ push: APNsPush, teamID: String, environment: APNsEnvironment) async throws -> APNsAnswer
    func renewProviderToken(teamID: String)
    func reconnect(teamID: String)
    /// Makes a broadcast channel; its id. Throws ``APNsChannelError`` when APNs refuses.
    func createChannel(bundleID: String, storagePolicy: APNsStoragePolicy, teamID: String, environment: APNsEnvironment) async throws -> String
    /// Deletes a broadcast channel. Throws ``APNsChannelError`` when APNs refuses.
    func deleteChannel(_ channelID: String, bundleID: String, teamID: String, environment: APNsEnvironment) async throws
}

extension APNsClient: APNsSending {}
