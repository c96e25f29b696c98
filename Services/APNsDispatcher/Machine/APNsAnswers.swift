import Foundation
import IsletMessages

/// What the dispatcher does with each APNs answer: one table, one action each
/// (see ../shared/reference/apple-rules.md, "What to do with each APNs answer").
public enum APNsAction: Equatable, Sendable {
    /// 200: delivered.
    case delivered
    /// The token is dead: 410 Unregistered / ExpiredToken (with APNs's timestamp), 400
    /// BadDeviceToken / DeviceTokenNotForTopic. Never retried; token-registry invalidates it.
    case tokenInvalid
    /// APNs refused the request itself (other 400s, 404, 405, 413): never retried.
    case rejected
    /// A broadcast's channel is not there: 400 ChannelNotRegistered (deleted, or never made for
    /// this app) or BadChannelId. Never retried; the channel's owner must make a new one.
    case channelInvalid
    /// 403 ExpiredProviderToken: mint a new provider token, open a new connection, retry once.
    case renewProviderToken
    /// Other 403s (invalid or missing provider token, wrong certificate environment, …): the app's
    /// credentials are wrong. Stop that app's lane (no hot loop), alert.
    case stopLane
    /// 429 TooManyRequests: too many pushes to this device token (or broadcasts on this channel).
    /// Back off this token (channel) only.
    case backOffToken
    /// 429 TooManyProviderTokenUpdates: provider tokens minted too often (a bug on our side).
    /// Wait, then retry on a new connection.
    case providerTokenChurn
    /// 500, 503 (and connection loss, GOAWAY, timeouts): retry with backoff on a fresh connection.
    case retry

    /// Whether the answer shows that APNs accepted the team's credentials (what a stopped lane's
    /// probe waits for): every answer about the push or its token does; a credentials refusal,
    /// an expired or churned provider token, and a server error do not.
    public var acceptsCredentials: Bool {
        switch self {
        case .delivered, .tokenInvalid, .rejected, .channelInvalid, .backOffToken: true
        case .renewProviderToken, .stopLane, .providerTokenChurn, .retry: false
        }
    }

    public static func forAnswer(status: Int, reason: String?) -> APNsAction {
        // Whether the token is dead is the table every service shares (InvalidationReason).
        if InvalidationReason(apnsStatus: status, reason: reason) != nil { return .tokenInvalid }
        if PushOutcome.APNsResponse.saysChannelIsGone(status: status, reason: reason) { return .channelInvalid }
        return switch (status, reason ?? "") {
        case (200, _): .delivered
        case (403, "ExpiredProviderToken"): .renewProviderToken
        case (403, _): .stopLane
        case (429, "TooManyProviderTokenUpdates"): .providerTokenChurn
        case (429, _): .backOffToken
        case (500..<600, _): .retry
        default: .rejected
        }
    }
}

