import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import HTTPTypes
import IsletMessages
import IsletProtos
import IsletRuntime
import IsletTokens
import Logging
import ServiceLifecycle
import SwiftProtobuf

/// The backends' gRPC API (`islet.tokens.v1.TokenRegistry`, Shared/IsletProtos/token_registry.proto):
/// look up an activity, list a user's live activities, invalidate an activity. Tokens never leave
/// through it.
public struct RegistryGRPCService: Islet_Tokens_V1_TokenRegistry.SimpleServiceProtocol {
    let registry: Registry

    public init(registry: Registry) {
        self.registry = registry
    }

    public func lookupActivity(
        request: Islet_Tokens_V1_LookupActivityRequest, context: ServerContext
    ) async throws -> Islet_Tokens_V1_ActivityState {
        try requireReady()
        let key = try activityKey(request.activityID, bundleId: request.bundleID)
        guard let record = registry.table.record(forKey: key) else {
            throw RPCError(code: .notFound, message: "no activity \(key)")
        }
        return Self.state(of: record)
    }

    public func listUserActivities(
        request: Islet_Tokens_V1_ListUserActivitiesRequest, context: ServerContext
    ) async throws -> Islet_Tokens_V1_ListUserActivitiesResponse {
        try requireReady()
        guard Validation.isIdentifier(request.userID, maxLength: 128) else {
            throw RPCError(code: .invalidArgument, message: "user_id must be 1-128 characters of letters, digits and . _ ~ -")
        }
        guard (0...500).contains(request.limit) else {
            throw RPCError(code: .invalidArgument, message: "limit must be between 1 and 500 (0 means 500)")
        }
        let limit = request.limit == 0 ? 500 : Int(request.limit)
        return .with {
            $0.activities = registry.table.activities(ofUser: request.userID, in: [.active], limit: limit).map(Self.state(of:))
        }
    }

    public func invalidateActivity(
        request: Islet_Tokens_V1_InvalidateActivityRequest, context: ServerContext
    ) async throws -> Islet_Tokens_V1_ActivityState {
        try requireReady()
        let key = try activityKey(request.activityID, bundleId: request.bundleID)
        let reason = InvalidationReason(rawValue: request.reason)
        guard Self.backendReasons.contains(reason) else {
            throw RPCError(
                code: .invalidArgument, message: "reason must be one of \(Self.backendReasons.map(\.rawValue).joined(separator: ", "))")
        }
        do {
            _ = try await registry.invalidateEverywhere(key, reason: reason)
        } catch {
            throw error.rpcError
        }
        guard let record = registry.table.record(forKey: key) else {
            throw RPCError(code: .internalError, message: "the activity's state could not be read back")
        }
        return Self.state(of: record)
    }

    /// The reasons a backend may give.
    static let backendReasons: [InvalidationReason] = [.backendEnded, .clientEnded, .severelyStale, .lifetimeExceeded, .ineligible]

    private func requireReady() throws {
        guard registry.isReady else { throw RPCError(code: .unavailable, message: "the registry is loading its tokens; retry shortly") }
    }

    /// The activity's key: of `bundleId`'s app, or (empty) of the only app that has the id.
    private func activityKey(_ activityId: String, bundleId: String) throws -> String {
        guard Validation.isIdentifier(activityId, maxLength: 128) else {
            throw RPCError(code: .invalidArgument, message: "activity_id must be 1-128 characters of letters, digits and . _ ~ -")
        }
        do {
            return try registry.activityKey(activityId, bundleId: bundleId.isEmpty ? nil : bundleId, user: nil)
        } catch {
            throw error.status == .notFound ? RPCError(code: .notFound, message: "no activity \(activityId)") : error.rpcError
        }
    }

    static func state(of record: TokenRecord) -> Islet_Tokens_V1_ActivityState {
        .with {
            $0.activityID = record.activityId ?? ""
            $0.userID = record.userId
            $0.kind = record.kind.rawValue
            $0.state = record.state.rawValue
            $0.bundleID = record.app.bundleId
            $0.environment = record.app.environment.rawValue
            $0.attributesType = record.attributesType
            $0.frequentUpdatesEnabled = record.frequentUpdatesEnabled
            $0.appVersion = record.appVersion
            $0.tokenFingerprint = TokenFingerprint.of(token: record.token)
            if let invalidation = record.invalidation {
                $0.invalidationReason = invalidation.reason.rawValue
                $0.invalidatedAt = Google_Protobuf_Timestamp(date: invalidation.invalidatedAt)
            }
            if let startedAt = record.activityStartedAt { $0.activityStartedAt = Google_Protobuf_Timestamp(date: startedAt) }
            $0.registeredAt = Google_Protobuf_Timestamp(date: record.registeredAt)
            $0.updatedAt = Google_Protobuf_Timestamp(date: record.updatedAt)
        }
    }
}

extension APIError {
    /// The gRPC status for an API refusal.
    var rpcError: RPCError {
        let code: RPCError.Code =
            switch status {
            case .notFound: .notFound
            case .forbidden: .permissionDenied
            case .conflict: .failedPrecondition
            case .serviceUnavailable: .unavailable
            case .unauthorized: .unauthenticated
            default: .invalidArgument
            }
        return RPCError(code: code, message: field.map { "\($0): \(reason)" } ?? reason)
    }
}
