import ArgumentParser
import AsyncHTTPClient
import Foundation
import IsletKafka
import IsletMessages
import Logging
import NIOCore
import NIOHTTP1

/// `islet publish-event --url`: an event through content-service's HTTP API.
enum EventPost {
    struct Target: Sendable, Equatable {
        var baseURL: String
        var key: String
        var idempotencyKey: String?

        func url(activityId: String) -> String {
            ServiceHTTP.activityURL(base: baseURL, activityId: activityId, then: "events")
        }
    }

    struct Defaulted: OptionSet, Sendable {
        let rawValue: Int
        static let eventId = Defaulted(rawValue: 1)
        static let occurredAt = Defaulted(rawValue: 2)
    }

    /// content-service's answer.
    struct Answer: Sendable, Equatable {
        var accepted: Bool
        var text: String

        private struct Reply: Decodable {
            var eventId: String
            var requestIds: [String]
        }

        init(status: Int, body: [UInt8], replayed: Bool, event: ActivityEvent) {
            if status == 202, let reply = try? JSONDecoder().decode(Reply.self, from: Data(body)) {
                accepted = true
                let requests = reply.requestIds.isEmpty ? "no push request" : "push requests \(reply.requestIds.joined(separator: ", "))"
                text = "\(replayed ? "already accepted (the first answer)" : "accepted") \(event.kind) \(event.activityId) sequence \(event.sequence) "
                    + "(event \(reply.eventId)): \(requests)"
                return
            }
            accepted = false
            text = ServiceHTTP.refusal(status: status, body: body)
        }
    }
}
