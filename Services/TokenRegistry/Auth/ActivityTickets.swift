import Foundation
import IsletMessages
import HTTPTypes
import IsletRuntime
import JWTKit

/// Verifies activity tickets: the proof, issued by the activity's backend, that a user owns an
/// activity.
///
/// Activity ids are chosen by backends and often guessable (`order-43`), so an app's JWT alone
/// cannot say whose activity an id is: the first user to register a token for it would own it.
/// A ticket settles that. The backend that created the order signs, with a key it shares with
/// token-registry, a JWT (HS256, `kid` naming the key) whose claims are:
///
/// | claim | value |
/// |-------|-------|
/// | `aud` | `islet-activity` (so that no other JWT of the same key passes as a ticket) |
/// | `sub` | the owner: the user id the app's own JWT carries |
/// | `act` | the activity id |
/// | `bid` | the app's bundle id |
/// | `exp` | at most ``maximumLifetime`` from now |
///
/// and gives it to the owner's app (in its order API's answer), which sends it with its token
/// registration (`ticket`). A registration with a valid ticket makes its user the activity's
/// verified owner, and replaces a registration of another user that had none (a squatter's);
/// a verified owner's activity can never be taken over without a ticket. docs/token-registry.md
/// "Who owns an activity" says it for app and backend teams.
public struct ActivityTickets: Sendable {
    /// The ticket's audience: a ticket is never an app's bearer JWT, nor the other way round.
    public static let audience = "islet-activity"
    /// The longest a ticket may be valid (an activity lives at most 12 hours on the lock screen).
    public static let maximumLifetime: TimeInterval = 86_400
    /// Clock difference allowed between the backend and this service.
    public static let leeway: TimeInterval = 60

    /// A ticket's claims, as backends sign them.
    public struct Claims: JWTPayload, Equatable {
        public var aud: AudienceClaim
        public var sub: SubjectClaim
        public var act: String
        public var bid: String
        public var exp: ExpirationClaim

        public init(user: String, activityId: String, bundleId: String, expires: Date) {
            self.aud = AudienceClaim(value: [ActivityTickets.audience])
            self.sub = SubjectClaim(value: user)
            self.act = activityId
            self.bid = bundleId
            self.exp = ExpirationClaim(value: expires)
        }

        public func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// Whether a registration without a ticket is refused (`ISLET_TICKETS_REQUIRED`).
    public let required: Bool
    private let keys: JWTKeyCollection
    private let kids: Set<String>
    private let clock: any WallClock

    /// `secrets`: `kid` → shared secret (at least 32 bytes).
    public init(secrets: [String: [UInt8]], required: Bool, clock: any WallClock = SystemWallClock()) async {
        let keys = JWTKeyCollection()
        for (kid, secret) in secrets {
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
        }
        self.keys = keys
        self.kids = Set(secrets.keys)
        self.required = required
        self.clock = clock
    }

    /// Signs a ticket (what a backend does; for tests, the demo and the CLI).
    public static func sign(_ claims: Claims, kid: String, secret: [UInt8]) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
        return try await keys.sign(claims, kid: JWKIdentifier(string: kid))
    }

    /// Returns when `ticket` proves that `user` owns `activityId` of `bundleId`; otherwise a 403
    /// naming the problem (field `ticket`). The reason never repeats the ticket.
    func verify(_ ticket: String, user: String, activityId: String, bundleId: String) async throws(APIError) {
        func refused(_ reason: String) -> APIError { APIError(.forbidden, .forbidden, field: "ticket", reason: reason) }
        guard ticket.utf8.count <= 4_096 else { throw refused("the ticket is longer than 4096 bytes") }
        guard let header = UnverifiedHeader.of(ticket) else { throw refused("the ticket is not a JWT") }
        guard header.alg == "HS256", let kid = header.kid, kids.contains(kid) else {
            throw refused("the ticket must be HS256 and name a known key in kid")
        }
        let claims: Claims
        do {
            claims = try await keys.verify(ticket, as: Claims.self)
        } catch {
            throw refused("the ticket's signature or claims do not verify")
        }
        let now = clock.date
        guard claims.aud.value.contains(Self.audience) else { throw refused("the ticket's aud must be \(Self.audience)") }
        guard now < claims.exp.value else { throw refused("the ticket has expired") }
        guard claims.exp.value.timeIntervalSince(now) <= Self.maximumLifetime + Self.leeway else {
            throw refused("the ticket is valid for longer than \(Int(Self.maximumLifetime)) s")
        }
        guard claims.sub.value == user else { throw refused("the ticket was issued to another user") }
        guard claims.act == activityId else { throw refused("the ticket is for another activity") }
        guard claims.bid == bundleId else { throw refused("the ticket is for another app") }
    }
}
