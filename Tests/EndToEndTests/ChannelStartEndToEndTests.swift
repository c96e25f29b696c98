import APNsSimulator
import ContentService
import Foundation
import IsletMessages
import NIOHTTP1
import Testing

extension EndToEnd {
    /// Issue 61 item 6: a phone joins a match sent by broadcast through a push-to-start that
    /// subscribes its new activity to the match's channel (iOS 18, `input-push-channel`).
    @Suite("End to end: push-to-start on a broadcast channel", .timeLimit(.minutes(5)))
    struct ChannelStartEndToEndTests {
        @Test("a backend's start of a match on a fan's phone is refused with 409 and Retry-After until the match started and its channel is made; then it reaches the phone's push-to-start token naming the channel, the phone is subscribed, and the match's next broadcasts and its end reach it; after the end a start is a 400")
        func fanJoinsTheMatch() async throws {
            let stack = try Stack(name: "channel-starts")
            try await stack.run { driver in
                let (type, bundleId) = ("MatchAttributes", "com.example.scores")
                let app = AppTarget(bundleId: bundleId, environment: .production)
                let match = "\(driver.run)match"
                let (fan, phone, startToken) = ("\(driver.run)fan", "\(driver.run)fan-phone", Driver.token(match + "-fan-start"))
                try await driver.registerPushToStart(bundleId: bundleId, device: phone, type: type, token: startToken, user: fan)
                let fields: [String: JSONValue] = ["matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "minute": 1]

                func join(_ eventId: String) async throws -> (Int, HTTPHeaders, [UInt8]) {
                    var body = ActivityEventBody(
                        driver.event(match, .start, type: type, sequence: 1, fields: fields, startTarget: .init(app: app, deviceId: phone),
                            attributes: ["matchId": "m-1", "home": "Lions", "away": "Bears"]),
                        bundleId: bundleId)
                    body.eventId = eventId
                    return try await HTTP.exchange(
                        stack.url(.content) + "/v1/activities/\(match)/events", method: .POST,
                        headers: [("Authorization", "Bearer \(stack.backendKey)"), ("Idempotency-Key", eventId)], body: try IsletJSON.encode(body),
                        timeout: .seconds(10))
                }

                // Before the match started: nothing to join yet, and nothing is written.
                let (early, headers, reason) = try await join("\(match)-early")
                #expect(early == 409 && headers.first(name: "Retry-After") == "1", "\(early) \(String(decoding: reason, as: UTF8.self))")
                #expect((try? IsletJSON.decodeValue(JSONValue.self, from: reason))?["field"]?.stringValue == "startTarget")

                // Kick-off: the first broadcast makes the match's channel.
                let kickOff = driver.event(match, .start, type: type, sequence: 1, fields: fields)
                try await driver.publish(kickOff)
                let first = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) {
                    $0.requestId == driver.requestId(kickOff) && $0.result.isFinal
                }
                let channel = try #require(first.channelId)

                // The fan's phone joins: retried while content-service has not read the outcome naming the channel.
                var (status, reply): (Int, [UInt8]) = (0, [])
                let deadline = ContinuousClock.now + .seconds(30)
                repeat {
                    (status, _, reply) = try await join("\(match)-join")
                    if status == 409 { try await Task.sleep(for: .milliseconds(100)) }
                } while status == 409 && ContinuousClock.now < deadline
                #expect(status == 202 || status == 200, "\(status)")
                func firstId(_ body: [UInt8]) -> String? {
                    guard case .array(let ids)? = (try? IsletJSON.decodeValue(JSONValue.self, from: body))?["requestIds"] else { return nil }
                    return ids.first?.stringValue
                }
                let joinId = try #require(firstId(reply))
                // A retry under another event id (a backend without Idempotency-Key) is the same start.
                let (again, _, retried) = try await join("\(match)-join-retry")
                #expect(again == 202 && firstId(retried) == joinId)
                let pushes = try await driver.received(token: startToken, through: joinId)
                let start = try #require(pushes.first { $0.apnsID.lowercased() == joinId.lowercased() })
                #expect(start.event == "start" && start.inputPushChannel == channel && start.topic == "\(bundleId).push-type.liveactivity")
                let payload = try IsletJSON.decodeValue(JSONValue.self, from: Array(start.payload.utf8))
                #expect(payload["aps"]?["input-push-token"] == nil, "the phone's activity is updated by the channel, not by a token")
                #expect(pushes.count == 1, "one start, no early one")
                let outcome = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) {
                    $0.requestId == joinId && $0.result.isFinal
                }
                #expect(outcome.result == .delivered && outcome.channelId == channel && outcome.pushToStartKey != nil)
                #expect(try await stack.channels(bundleId: bundleId).first { $0.id == channel }?.subscribers == 1, "the phone is on the channel")

                // The match goes on: one broadcast reaches the fan's phone; the end too.
                let goal = driver.event(match, .update, type: type, sequence: 2, fields: ["matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "minute": 13])
                let end = driver.event(match, .end, type: type, sequence: 3, fields: ["period": "full_time", "matchId": "m-1", "homeTeam": "Lions", "awayTeam": "Bears", "homeScore": 1, "minute": 90])
                for event in [goal, end] {
                    try await driver.publish(event)
                    let id = driver.requestId(event)
                    _ = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self) { $0.requestId == id && $0.result.isFinal }
                }
                let broadcasts = try await stack.broadcasts(channel: channel)
                #expect(broadcasts.map(\.event) == ["update", "update", "end"])
                #expect(broadcasts.dropFirst().allSatisfy { $0.subscribers == 1 }, "\(broadcasts.map(\.subscribers))")
                #expect(try #require(broadcasts.dropFirst().first).timestamp > start.timestamp, "stamped past the start: the phone shows it")

                // The match is over: a start now is refused for good (400), not a retry.
                let (late, _, lateReason) = try await join("\(match)-late")
                #expect(late == 400 && String(decoding: lateReason, as: UTF8.self).contains("ended"), "\(late) \(String(decoding: lateReason, as: UTF8.self))")
                #expect(try await stack.received(token: startToken).count == 1, "no second start on the phone")
            }
        }
    }
}
