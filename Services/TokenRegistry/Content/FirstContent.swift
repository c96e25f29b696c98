import Foundation
import HTTPTypes
import IsletMessages
import IsletRuntime

/// An app's `GET /v1/activities/{activityId}/content?bundleId=`: the content an activity its
/// backend announced shows now, so that the app starts its Live Activity only with real data
/// (Lyft's pattern), and never with another user's.
///
/// The caller proves the activity is its user's with the activity's ticket (the backend's signed
/// `sub`/`act`/`bid`, ``ActivityTickets``) in `Islet-Activity-Ticket`, beside its JWT: an
/// activity id alone is guessable (`order-43`), and content is the user's order. Nothing is
/// written: asking does not register, own or change anything.
public struct FirstContent: Sendable {
    /// The header the ticket comes in (not the query: URLs end up in access logs).
    public static let ticketHeader = HTTPField.Name("Islet-Activity-Ticket")!

    let tickets: ActivityTickets
    let source: any ActivityContentSource
    /// The apps this registry serves (any, when empty).
    let apps: Set<String>

    public init(tickets: ActivityTickets, source: any ActivityContentSource, apps: Set<String> = []) {
        self.tickets = tickets
        self.source = source
        self.apps = apps
    }

    /// The content for `user`, who sent `ticket`; a 4xx naming the problem, or 503.
    public func content(user: String, activityId: String, bundleId: String?, ticket: String?) async throws(APIError) -> [UInt8] {
        let activityId = try Validation.identifier(activityId, field: "activityId")
        guard let bundleId else {
            throw APIError.invalid("bundleId", "required as a query parameter (?bundleId=com.example.app): activity ids are scoped per app")
        }
        _ = try Validation.bundleId(bundleId, field: "bundleId")
        if !apps.isEmpty, !apps.contains(bundleId) {
            throw APIError.invalid("bundleId", "\(bundleId) is not an app this registry serves")
        }
        guard let ticket, !ticket.isEmpty else {
            throw APIError(
                .forbidden, .forbidden, field: "ticket",
                reason: "the activity's ticket from its backend is required in the \(Self.ticketHeader) header: it proves the activity is this user's")
        }
        try await tickets.verify(ticket, user: user, activityId: activityId, bundleId: bundleId)
        return try await source.content(activityId: activityId, bundleId: bundleId)
    }
}
