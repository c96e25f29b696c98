import Foundation
import IsletMessages
import IsletRuntime
import IsletTesting
import IsletTokens
import Testing
@testable import TokenRegistry
import HTTPTypes

/// Who owns an activity: the user its backend's ticket names, whoever registered the id first.
@Suite("Activity tickets")
struct ActivityTicketTests {
    static let kid = "orders"
    static let secret = Array("a-ticket-secret-that-is-at-least-32-bytes".utf8)
    let clock = ManualClock()
    let publisher = RecordingPublisher()

    func makeRegistry(required: Bool = false) async -> Registry {
        let tickets = await ActivityTickets(secrets: [Self.kid: Self.secret], required: required, clock: clock)
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, tickets: tickets, clock: clock)
        registry.markReady()
        return registry
    }

    func ticket(
        user: String, activity: String = "order-43", bundleId: String = "com.example.food", expiresIn: TimeInterval = 3_600,
        kid: String = kid, secret: [UInt8] = secret
    ) async throws -> String {
        try await ActivityTickets.sign(
            .init(user: user, activityId: activity, bundleId: bundleId, expires: clock.date.addingTimeInterval(expiresIn)), kid: kid, secret: secret)
    }

    func request(token: String, ticket: String? = nil) -> RegisterActivityTokenRequest {
        var request = activityRequest(token: token)
        request.ticket = ticket
        return request
    }

    @Test("a squatter registers a guessable id first; the owner's ticketed registration replaces it (claimed), and the squatter can neither take it back nor read it")
    func ownerReclaimsASquattedId() async throws {
        let registry = await makeRegistry()
        let squatted = try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(token: hexToken(9)))
        #expect(squatted.change == .registered && squatted.token.ownerVerified == nil)

        let claimed = try await registry.registerActivityToken(
            user: "alice", activityId: "order-43", request(token: hexToken(1), ticket: try await ticket(user: "alice")))
        #expect(claimed.change == .claimed)
        #expect(claimed.token.ownerVerified == true)
        let record = try #require(registry.table.record(forKey: MessageKey.activity(bundleId: "com.example.food", activityId: "order-43")))
        #expect(record.userId == "alice" && record.token == hexToken(1) && record.state == .active, "the squatter's token is gone from the key")

        let back = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(token: hexToken(9)))
        }
        #expect(back?.status == .forbidden && back?.field == "activityId")
        #expect(throws: APIError.notFound) { try registry.activity(user: "mallory", activityId: "order-43") }
        // The owner rotates without a ticket: still verified.
        let rotated = try await registry.registerActivityToken(user: "alice", activityId: "order-43", request(token: hexToken(2)))
        #expect(rotated.change == .rotated && rotated.token.ownerVerified == true)
        #expect(publisher.records.count == 3)
    }

    @Test("a ticket proves only what it names: another user's, another activity's, another app's, an expired, a too-long-lived or a forged ticket is 403 on the ticket field, and nothing is written")
    func ticketsProveOnlyWhatTheyName() async throws {
        let registry = await makeRegistry()
        let cases: [(String, String)] = [
            ("another user's", try await ticket(user: "alice")),
            ("another activity's", try await ticket(user: "mallory", activity: "order-44")),
            ("another app's", try await ticket(user: "mallory", bundleId: "com.example.ride")),
            ("expired", try await ticket(user: "mallory", expiresIn: -1)),
            ("valid for a year", try await ticket(user: "mallory", expiresIn: 365 * 86_400)),
            ("signed with another secret", try await ticket(user: "mallory", secret: Array("another-secret-that-is-at-least-32-bytes!".utf8))),
            ("naming an unknown key", try await ticket(user: "mallory", kid: "other")),
            ("not a JWT", "not-a-ticket"),
        ]
        for (what, ticket) in cases {
            let error = await #expect(throws: APIError.self, "\(what)") {
                try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(token: hexToken(9), ticket: ticket))
            }
            #expect(error?.status == .forbidden && error?.field == "ticket", "\(what): \(String(describing: error))")
            #expect(error.map { !$0.reason.contains(ticket) } ?? true, "\(what): the reason repeats the ticket")
        }
        // An app's bearer JWT signed with the same secret is not a ticket (no aud, no act).
        let bearer = try await TestKeys.bearer("mallory", kid: Self.kid, secret: String(decoding: Self.secret, as: UTF8.self))
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(
                user: "mallory", activityId: "order-43", request(token: hexToken(9), ticket: String(bearer.dropFirst("Bearer ".count))))
        }
        #expect(error?.field == "ticket")
        #expect(publisher.records.isEmpty)
    }

    @Test("a verified owner's activity stays theirs: another user's ticketless registration is 403, and the owner registering first needs no takeover")
    func verifiedOwnerKeepsTheActivity() async throws {
        let registry = await makeRegistry()
        let first = try await registry.registerActivityToken(
            user: "alice", activityId: "order-43", request(token: hexToken(1), ticket: try await ticket(user: "alice")))
        #expect(first.change == .registered && first.token.ownerVerified == true)
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(token: hexToken(9)))
        }
        #expect(error?.status == .forbidden)
        #expect(publisher.records.count == 1)
    }

    @Test("with tickets required, a registration without one is 403 and writes nothing; with one it registers")
    func ticketsRequired() async throws {
        let registry = await makeRegistry(required: true)
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(user: "mallory", activityId: "order-43", request(token: hexToken(9)))
        }
        #expect(error?.status == .forbidden && error?.field == "ticket")
        #expect(publisher.records.isEmpty)
        let registered = try await registry.registerActivityToken(
            user: "alice", activityId: "order-43", request(token: hexToken(1), ticket: try await ticket(user: "alice")))
        #expect(registered.change == .registered)
    }

    @Test("a registry without ticket keys refuses a ticket (400) rather than ignoring it")
    func noKeysRefusesTickets() async throws {
        let registry = Registry(table: TokenTable(), publisher: publisher, logger: quietLogger, clock: clock)
        registry.markReady()
        let error = await #expect(throws: APIError.self) {
            try await registry.registerActivityToken(
                user: "alice", activityId: "order-43", request(token: hexToken(1), ticket: try await ticket(user: "alice")))
        }
        #expect(error?.status == .badRequest && error?.field == "ticket")
    }

    @Test("settings: ticket keys of 32 bytes at least; tickets required only with keys")
    func settings() throws {
        let base = ["ISLET_AUTH_HS256_KEYS": "hs=\(TestKeys.hsSecret)"]
        let settings = try RegistrySettings(from: .variables(base.merging(
            ["ISLET_TICKET_HS256_KEYS": "orders=\(String(decoding: Self.secret, as: UTF8.self))", "ISLET_TICKETS_REQUIRED": "true"]) { $1 }))
        #expect(settings.ticketKeys == [Self.kid: Self.secret] && settings.ticketsRequired)
        #expect(throws: ConfigurationError.self) {
            try RegistrySettings(from: .variables(base.merging(["ISLET_TICKET_HS256_KEYS": "orders=short"]) { $1 }))
        }
        #expect(throws: ConfigurationError.self) {
            try RegistrySettings(from: .variables(base.merging(["ISLET_TICKETS_REQUIRED": "true"]) { $1 }))
        }
    }
}
