import Foundation
import Hummingbird
import IsletMessages

/// The simulator's admin API (plain HTTP/1.1, for tests, demos and operators):
///
/// | route | does |
/// | --- | --- |
/// | `GET /admin/notifications?token=…&limit=…&payload=false` | what was accepted, oldest first (a phone's view) |
/// | `GET /admin/notifications?from=N&count=M&payload=false` | a page of it: `M` (at most 100,000) after the `N` oldest |
/// | `DELETE /admin/notifications` | forget them and reset the counters |
/// | `POST /admin/faults` | inject a ``Fault`` (JSON); answers its id |
/// | `DELETE /admin/faults` | clear every fault |
/// | `GET /admin/stats` | ``SimulatorStats`` |
/// | `GET /admin/channels?bundleId=…` | the broadcast channels (an app's), with subscribers and broadcasts |
/// | `POST /admin/subscribers` | `{"bundleId": …, "channelId": …, "count": N}`: N more simulated activities on the channel (ids are base64: not in the path) |
/// | `GET /admin/broadcasts?channel=…&limit=…&payload=false` | the broadcasts accepted, oldest first |
/// | `GET /admin/certificate` | the TLS certificate (PEM) clients should trust |
public enum SimulatorAdminAPI {
    public static func addRoutes<Context: RequestContext>(to router: Router<Context>, state: SimulatorState, certificatePEM: String) {
        router.get("/admin/notifications") { request, _ -> Response in try notifications(request, state: state) }
        router.delete("/admin/notifications") { _, _ -> Response in
            state.clearNotifications()
            return Response(status: .noContent)
        }
        router.post("/admin/faults") { request, _ -> Response in try await addFault(request, state: state) }
        router.delete("/admin/faults") { _, _ -> Response in
            state.clearFaults()
            return Response(status: .noContent)
        }
        router.get("/admin/stats") { _, _ -> Response in try json(state.stats) }
        router.get("/admin/channels") { request, _ -> Response in
            try json(state.channels(bundleId: request.uri.queryParameters.get("bundleId")))
        }
        router.post("/admin/subscribers") { request, _ -> Response in try await addSubscribers(request, state: state) }
        router.get("/admin/broadcasts") { request, _ -> Response in try broadcasts(request, state: state) }
        router.get("/admin/certificate") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/x-pem-file"], body: .init(byteBuffer: ByteBuffer(string: certificatePEM)))
        }
        router.get("/health") { _, _ -> Response in try json(["status": "ready"]) }
    }

    /// `GET /admin/notifications`: by token and limit, or a page (`from`, `count`); `payload=false`
    /// leaves the bodies out (for large queries).
    static func notifications(_ request: Request, state: SimulatorState) throws -> Response {
        let token = request.uri.queryParameters.get("token")?.lowercased()
        let limit = request.uri.queryParameters.get("limit").flatMap(Int.init) ?? .max
        var notifications: [AcceptedNotification]
        if let from = request.uri.queryParameters.get("from").flatMap(Int.init) {
            let count = request.uri.queryParameters.get("count").flatMap(Int.init) ?? 100_000
            notifications = state.notifications(from: from, count: min(count, 100_000))
        } else {
            notifications = state.notifications(token: token, limit: limit)
        }
        // payload=false: without the bodies (for large queries).
        if request.uri.queryParameters.get("payload") == "false" {
            for i in notifications.indices { notifications[i].payload = "" }
        }
        return try json(notifications)
    }

    /// `POST /admin/faults`: a ``Fault`` (JSON); answers its id.
    static func addFault(_ request: Request, state: SimulatorState) async throws -> Response {
        let body = try await request.body.collect(upTo: 65_536)
        let fault: Fault
        do {
            fault = try JSONDecoder().decode(Fault.self, from: Data(body.readableBytesView))
        } catch {
            return Response(
                status: .badRequest, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"reason":"a fault is {\"kind\": reject|delay|stall|goAway|reset, …}"}"#)))
        }
        return try json(["id": state.add(fault)], status: .created)
    }

    /// `POST /admin/subscribers`: ``Subscribers`` more simulated activities on a channel.
    static func addSubscribers(_ request: Request, state: SimulatorState) async throws -> Response {
        let body = try await request.body.collect(upTo: 65_536)
        guard let asked = try? JSONDecoder().decode(Subscribers.self, from: Data(body.readableBytesView)), (1...10_000_000).contains(asked.count) else {
            return try json(["reason": "subscribers are {\"bundleId\": …, \"channelId\": …, \"count\": 1…10000000}"], status: .badRequest)
        }
        guard state.subscribe(asked.count, to: asked.channelId, bundleId: asked.bundleId) else {
            return try json(["reason": "\(asked.bundleId) has no channel \(asked.channelId)"], status: .notFound)
        }
        return try json(state.channel(asked.channelId, bundleId: asked.bundleId))
    }

    /// `GET /admin/broadcasts`: by channel and limit; `payload=false` leaves the bodies out.
    static func broadcasts(_ request: Request, state: SimulatorState) throws -> Response {
        var broadcasts = state.broadcasts(
            channel: request.uri.queryParameters.get("channel"), limit: request.uri.queryParameters.get("limit").flatMap(Int.init) ?? .max)
        if request.uri.queryParameters.get("payload") == "false" {
            for i in broadcasts.indices { broadcasts[i].payload = "" }
        }
        return try json(broadcasts)
    }

    /// `POST /admin/subscribers`: simulated activities to add to a channel.
    struct Subscribers: Decodable {
        var bundleId: String
        var channelId: String
        var count: Int
    }

    static func json<Value: Encodable>(_ value: Value, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try IsletJSON.encode(value))))
    }
}
