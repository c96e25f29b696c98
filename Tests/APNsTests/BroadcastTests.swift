@testable import APNsSimulator
import Foundation
import Hummingbird
import HummingbirdTesting
import IsletMessages
import IsletTesting
import NIOCore
import Testing
@testable import APNsDispatcher

/// A broadcast of `text` on `channel` of the food app.
func broadcast(
    _ channel: String, priority: Int = 10, expiration: Int64 = 0, payload text: String = payload(), requestID: String = UUID().uuidString.lowercased()
) -> APNsPush {
    APNsPush(
        destination: .channel(id: channel, bundleID: "com.example.food"), priority: priority, apnsID: requestID, expiration: expiration,
        payload: ByteBuffer(string: text))
}

@Suite("Broadcast channels (iOS 18): the client's channel management and broadcasts against the simulator", .timeLimit(.minutes(2)))
struct BroadcastClientTests {
    let team = signingKey.teamID

    @Test("a channel is made (201 and its id), read (its storage policy), listed and deleted (204); then it is not registered, and another app never sees it")
    func lifecycle() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            let scores = try await client.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: team, environment: .production)
            let stored = try await client.createChannel(
                bundleID: "com.example.food", storagePolicy: .mostRecentMessageStored, teamID: team, environment: .production)
            #expect(Data(base64Encoded: scores) != nil && scores != stored)
            #expect(try await client.channelPolicy(scores, bundleID: "com.example.food", teamID: team, environment: .production) == .noMessageStored)
            #expect(try await client.channelPolicy(stored, bundleID: "com.example.food", teamID: team, environment: .production) == .mostRecentMessageStored)
            #expect(Set(try await client.channels(bundleID: "com.example.food", teamID: team, environment: .production)) == [scores, stored])
            #expect(try await client.channels(bundleID: "com.example.ride", teamID: team, environment: .production).isEmpty)
            let otherApp = await #expect(throws: APNsChannelError.self) {
                try await client.channelPolicy(scores, bundleID: "com.example.ride", teamID: team, environment: .production)
            }
            #expect(otherApp?.status == 400 && otherApp?.reason == "ChannelNotRegistered")

            try await client.deleteChannel(scores, bundleID: "com.example.food", teamID: team, environment: .production)
            #expect(try await client.channels(bundleID: "com.example.food", teamID: team, environment: .production) == [stored])
            let gone = await #expect(throws: APNsChannelError.self) {
                try await client.deleteChannel(scores, bundleID: "com.example.food", teamID: team, environment: .production)
            }
            #expect(gone?.channelIsGone == true && gone?.reason == "ChannelNotRegistered")
            #expect(server.state.stats.channelsCreated == 2 && server.state.stats.channelsDeleted == 1)
            client.shutdown()
        }
    }

    @Test("management refusals come back with APNs's reasons: a bad body, a push type that is not LiveActivity, no or a bad channel id, a topic for a bundle, the app's channel limit")
    func managementRefusals() async throws {
        try await withSimulator(state: SimulatorState(channelLimit: 2)) { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            func reply(_ method: String, _ path: String, channel: String? = nil, body: String? = nil) async throws -> (Int, String?) {
                let request = APNsChannelRequest(
                    method: method, path: path, channelID: channel, body: body.map { ByteBuffer(string: $0) }, requestID: UUID().uuidString.lowercased())
                let reply = try await client.exchange(request, teamID: team, environment: .production)
                return (reply.status, APNsAnswer(status: reply.status, apnsID: nil, body: reply.body).reason)
            }
            let channels = "/1/apps/com.example.food/channels"
            #expect(try await reply("POST", channels, body: "not json") == (400, "BadRequestParams"))
            #expect(try await reply("POST", channels, body: #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#) == (400, "BadRequestParams"))
            #expect(try await reply("POST", channels, body: #"{"message-storage-policy":0}"#) == (400, "MissingPushType"))
            #expect(try await reply("POST", channels, body: #"{"message-storage-policy":0,"push-type":"Alert"}"#) == (400, "InvalidPushType"))
            #expect(try await reply("GET", channels) == (400, "MissingChannelId"))
            #expect(try await reply("GET", channels, channel: "not base64!") == (400, "BadChannelId"))
            #expect(try await reply("DELETE", channels, channel: "bm90LWEtY2hhbm5lbA==") == (400, "ChannelNotRegistered"))
            #expect(try await reply("PUT", channels) == (405, "MethodNotAllowed"))
            #expect(try await reply("GET", "/1/apps/com.example.food/everything") == (404, "BadPath"))
            #expect(try await reply("GET", "/1/apps/com.example.food.push-type.liveactivity/all-channels") == (400, "TopicDisallowed"))

            for _ in 0..<2 { _ = try await client.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: team, environment: .production) }
            let full = await #expect(throws: APNsChannelError.self) {
                try await client.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: team, environment: .production)
            }
            #expect(full?.status == 400 && full?.reason == "CannotCreateChannelConfig" && full?.requestID != nil)
            // The limit is per app.
            _ = try await client.createChannel(bundleID: "com.example.ride", storagePolicy: .noMessageStored, teamID: team, environment: .production)
            #expect(server.state.channels().count == 3)
            client.shutdown()
        }
    }

    @Test("one broadcast reaches every activity subscribed to the channel: those started with input-push-channel and simulated ones; it is recorded once with their count")
    func broadcastReachesSubscribers() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            let channel = try await client.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: team, environment: .production)
            // Two phones start the activity on the channel (push-to-start with input-push-channel).
            for seed in 1...2 {
                let start = payload(event: "start").replacingOccurrences(of: #""event":"start","#, with: #""event":"start","input-push-channel":"\#(channel)","#)
                #expect(try await client.send(push(hexToken(seed), payload: start), teamID: team, environment: .production).status == 200)
            }
            #expect(server.state.subscribe(998, to: channel, bundleId: "com.example.food"))
            #expect(server.state.channel(channel, bundleId: "com.example.food")?.subscribers == 1_000)

            let id = UUID().uuidString.lowercased()
            let answer = try await client.send(broadcast(channel, priority: 5, requestID: id), teamID: team, environment: .production)
            #expect(answer.status == 200 && answer.apnsID == id)
            #expect(APNsAction.forAnswer(status: answer.status, reason: answer.reason) == .delivered)
            let recorded = try #require(server.state.broadcasts(channel: channel).first)
            #expect(recorded.requestId == id && recorded.priority == 5 && recorded.event == "update" && recorded.subscribers == 1_000)
            #expect(recorded.payload == payload())
            #expect(server.state.stats.broadcasts == 1 && server.state.stats.broadcastDeliveries == 1_000)
            #expect(server.state.notifications().count == 2, "the broadcast is not a push to a token")
            client.shutdown()
        }
    }

    @Test("broadcast refusals come back with APNs's reasons and one action each from the answer table")
    func broadcastRefusals() async throws {
        try await withSimulator { server, port, trust in
            let client = try makeClient(port: port, trust: trust)
            let scores = try await client.createChannel(bundleID: "com.example.food", storagePolicy: .noMessageStored, teamID: team, environment: .production)
            let stored = try await client.createChannel(
                bundleID: "com.example.food", storagePolicy: .mostRecentMessageStored, teamID: team, environment: .production)
            func answer(_ push: APNsPush) async throws -> (Int, String?, APNsAction) {
                let answer = try await client.send(push, teamID: team, environment: .production)
                return (answer.status, answer.reason, APNsAction.forAnswer(status: answer.status, reason: answer.reason))
            }
            #expect(try await answer(broadcast("bm90LWEtY2hhbm5lbA==")) == (400, "ChannelNotRegistered", .channelInvalid))
            #expect(try await answer(broadcast("not base64!")) == (400, "BadChannelId", .channelInvalid))
            #expect(try await answer(broadcast(scores, expiration: 1_795_000_000)) == (400, "BadExpirationDate", .rejected))
            #expect(try await answer(broadcast(stored, expiration: 1_795_000_000)) == (200, nil, .delivered), "a channel that stores a message takes an expiration")
            #expect(try await answer(broadcast(scores, priority: 1)) == (200, nil, .delivered))
            #expect(try await answer(broadcast(scores, priority: 7)) == (400, "BadPriority", .rejected))
            #expect(try await answer(broadcast(scores, payload: payload(event: "start"))) == (400, "BadRequestPayload", .rejected), "a broadcast can never start")
            #expect(try await answer(broadcast(scores, payload: "{")) == (400, "BadRequestPayload", .rejected))
            // 5 KB, not the token path's 4 KB.
            let padding = { (bytes: Int) in payload(extra: #","note":"\#(String(repeating: "x", count: bytes - payload().utf8.count - 10))""#) }
            #expect(padding(5_120).utf8.count == 5_120)
            #expect(try await answer(broadcast(scores, payload: padding(5_120))) == (200, nil, .delivered))
            #expect(try await answer(broadcast(scores, payload: padding(5_121))) == (413, "PayloadTooLarge", .rejected))

            // Faults: on this channel only; a token's fault leaves broadcasts alone.
            server.state.add(.reject(429, "TooManyRequests", token: hexToken(1)))
            server.state.add(.reject(429, "TooManyRequests", channel: stored))
            #expect(try await answer(broadcast(scores)) == (200, nil, .delivered))
            #expect(try await answer(broadcast(stored)) == (429, "TooManyRequests", .backOffToken))
            server.state.add(.reject(503, "ServiceUnavailable", channel: scores))
            #expect(try await answer(broadcast(scores)) == (503, "ServiceUnavailable", .retry))
            #expect(try await client.send(push(hexToken(1)), teamID: team, environment: .production).status == 429)
            client.shutdown()
        }
    }

    @Test("the simulator's admin API lists an app's channels, adds simulated subscribers (refusing a channel the app has not, or a bad count) and lists the broadcasts")
    func adminAPI() async throws {
        let state = SimulatorState()
        let channel = try state.createChannel(bundleId: "com.example.food", storagePolicy: 0, now: Date()).get()
        let router = Router()
        SimulatorAdminAPI.addRoutes(to: router, state: state, certificatePEM: "")
        try await Application(router: router, logger: quietLogger).test(.router) { client in
            func subscribe(_ body: String) async throws -> HTTPResponse.Status {
                try await client.execute(uri: "/admin/subscribers", method: .post, body: ByteBuffer(string: body)) { $0.status }
            }
            #expect(try await subscribe(#"{"bundleId":"com.example.food","channelId":"\#(channel.id)","count":1000}"#) == .ok)
            #expect(try await subscribe(#"{"bundleId":"com.example.ride","channelId":"\#(channel.id)","count":1}"#) == .notFound)
            #expect(try await subscribe(#"{"bundleId":"com.example.food","channelId":"\#(channel.id)","count":0}"#) == .badRequest)
            #expect(try await subscribe("{}") == .badRequest)
            try await client.execute(uri: "/admin/channels?bundleId=com.example.food", method: .get) { (response) async throws in
                let channels = try IsletJSON.decodeValue([SimulatedChannel].self, from: Array(response.body.readableBytesView))
                #expect(channels.map(\.id) == [channel.id] && channels.first?.subscribers == 1_000)
            }
            try await client.execute(uri: "/admin/channels?bundleId=com.example.ride", method: .get) { (response) async throws in
                #expect(try IsletJSON.decodeValue([SimulatedChannel].self, from: Array(response.body.readableBytesView)).isEmpty)
            }
            try await client.execute(uri: "/admin/broadcasts", method: .get) { (response) async throws in
                #expect(try IsletJSON.decodeValue([AcceptedBroadcast].self, from: Array(response.body.readableBytesView)).isEmpty)
            }
        }
    }
}

@Suite("apns-dispatcher's settings: the broadcast and channel management hosts")
struct BroadcastEndpointSettingsTests {
    @Test("Apple's broadcast hosts by default (channels on 2196 and 2195); ISLET_APNS_URL points every service at one server; each has its own variable")
    func endpoints() throws {
        let apple = try DispatcherBudgetSettingsTests.settings([:]).client
        #expect(apple.endpoint(.broadcast, .production) == .init(host: "api-broadcast.push.apple.com", port: 443))
        #expect(apple.endpoint(.broadcast, .sandbox) == .init(host: "api-broadcast.sandbox.push.apple.com", port: 443))
        #expect(apple.endpoint(.channels, .production) == .init(host: "api-manage-broadcast.push.apple.com", port: 2196))
        #expect(apple.endpoint(.channels, .sandbox) == .init(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195))
        #expect(apple.endpoint(.push, .sandbox) == .sandbox)

        let simulator = try DispatcherBudgetSettingsTests.settings([
            "ISLET_APNS_URL": "https://127.0.0.1:2197", "ISLET_APNS_CHANNELS_SANDBOX_URL": "https://manage.example:8443",
        ]).client
        for service in APNsClient.Service.allCases {
            #expect(simulator.endpoint(service, .production) == .init(host: "127.0.0.1", port: 2197))
        }
        #expect(simulator.endpoint(.channels, .sandbox) == .init(host: "manage.example", port: 8443))
        #expect(throws: (any Error).self) { try DispatcherBudgetSettingsTests.settings(["ISLET_APNS_BROADCAST_PRODUCTION_URL": "http://plain"]) }
    }
}
