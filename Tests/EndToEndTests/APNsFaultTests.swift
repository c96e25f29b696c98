import APNsSimulator
import Foundation
import IsletMessages
import Testing

extension EndToEnd {
    @Suite("End to end: APNs faults", .timeLimit(.minutes(10)))
    struct APNsFaultTests {
        /// One activity per fault: what the simulator does to its pushes, and what must come of it.
        struct Case: Sendable {
            var name: String
            var faults: [Fault]
            var result: PushResult
            var attempts: ClosedRange<Int>
            /// The least time from the request to its outcome (backoff).
            var atLeast: Double = 0
            var invalidates = false
        }

        @Test("429, 410, BadDeviceToken, 5xx bursts, GOAWAY, resets, a stall and an expired provider token: each ends as specified, retries bounded and spaced, dead tokens invalidated within seconds, never TooManyProviderTokenUpdates")
        func faults() async throws {
            let dispatcher = [
                "ISLET_RETRY_TOKEN_BACKOFF_MS": "2000", "ISLET_APNS_REQUEST_TIMEOUT_MS": "5000", "ISLET_RETRY_MAX_ATTEMPTS": "4",
                "ISLET_RETRY_MAX_DELAY_MS": "1000",
            ]
            let stack = try Stack(name: "apns-faults", extra: [.dispatcher: dispatcher])
            try await stack.run { driver in try await run(stack: stack, driver: driver) }
        }

        func run(stack: Stack, driver: Driver) async throws {
            // APNs's 410 timestamp says since when the token is dead; the registry ignores one older than the registration.
            let now = Date().addingTimeInterval(30)
            func token(_ name: String) -> String { Driver.token(driver.run + name) }
            // In phases: a fault that closes or renews a connection (GOAWAY, reset, a renewed provider
            // token) also ends the other streams in flight on it, which are then resent — an extra
            // attempt for them. Each phase's faults act on their own; ordinary activities share them.
            let phases: [[Case]] = [
                [
                    Case(name: "unregistered", faults: [.reject(410, "Unregistered", token: token("unregistered"), count: nil, timestamp: now)], result: .tokenInvalid, attempts: 1...1, invalidates: true),
                    Case(name: "bad-token", faults: [.reject(400, "BadDeviceToken", token: token("bad-token"), count: nil)], result: .tokenInvalid, attempts: 1...1, invalidates: true),
                    Case(name: "throttled", faults: [.reject(429, "TooManyRequests", token: token("throttled"))], result: .delivered, attempts: 2...2, atLeast: 2),
                    Case(
                        name: "burst",
                        faults: [.reject(500, "InternalServerError", token: token("burst"), count: 2), .reject(503, "ServiceUnavailable", token: token("burst"))],
                        result: .delivered, attempts: 4...4),
                    Case(name: "down", faults: [.reject(503, "ServiceUnavailable", token: token("down"), count: nil)], result: .failed, attempts: 4...4),
                ],
                [Case(name: "expired-jwt", faults: [.reject(403, "ExpiredProviderToken", token: token("expired-jwt"))], result: .delivered, attempts: 2...2)],
                [Case(name: "goaway", faults: [Fault(kind: .goAway, token: token("goaway"))], result: .delivered, attempts: 1...2)],
                [Case(name: "reset", faults: [Fault(kind: .reset, token: token("reset"))], result: .delivered, attempts: 2...2)],
                [Case(name: "stall", faults: [Fault(kind: .stall, token: token("stall"))], result: .delivered, attempts: 2...2, atLeast: 2)],
            ]
            let cases = phases.flatMap { $0 }
            var ledger = Ledger()
            var invalidated: [String: Date] = [:]
            for (number, phase) in phases.enumerated() {
                for item in phase {
                    try await driver.registerActivity(driver.run + item.name, token: token(item.name), type: "DeliveryAttributes", bundleId: "com.example.food")
                    for fault in item.faults { try await stack.inject(fault) }
                }
                // Ordinary traffic on other activities meanwhile.
                let bystanders = (0..<10).map { "\(driver.run)bystander-\(number)-\($0)" }
                for activity in bystanders {
                    try await driver.registerActivity(activity, token: token(activity), type: "DeliveryAttributes", bundleId: "com.example.food")
                }
                // Token-registry's view of the dead tokens, watched every 20 ms from now.
                let watch = Task { try await invalidationTimes(stack: stack, activities: phase.filter(\.invalidates).map { driver.run + $0.name }) }
                for activity in phase.map({ driver.run + $0.name }) + bystanders {
                    try await driver.publish(
                        driver.event(activity, .start, type: "DeliveryAttributes", sequence: 1, fields: ["orderId": "1", "storeName": "Casa Lola", "status": "placed"]))
                }
                let settled = try await Ledger.settle(
                    bootstrap: stack.bootstrap, prefix: driver.run, expecting: ledger.requests.count + phase.count + bystanders.count, timeout: .seconds(180))
                #expect(settled.violations.isEmpty, "\(settled.violations)")
                ledger = settled
                invalidated.merge(try await watch.value) { $1 }
                #expect(bystanders.allSatisfy { activity in ledger.outcomes.values.contains { $0.first?.activityId == activity && $0.first?.result == .delivered } })
            }

            for item in cases {
                let outcome = try #require(ledger.outcomes.values.compactMap(\.first).first { $0.activityId == driver.run + item.name }, "\(item.name): an outcome")
                let request = try #require(ledger.requests[outcome.requestId])
                #expect(outcome.result == item.result, "\(item.name): \(outcome.result.rawValue) (\(outcome.detail ?? ""))")
                #expect(item.attempts.contains(outcome.attempts), "\(item.name): \(outcome.attempts) attempts")
                let took = outcome.completedAt.timeIntervalSince(request.createdAt)
                #expect(took >= item.atLeast, "\(item.name): outcome after \(took) s, backoff \(item.atLeast) s")
                if item.invalidates {
                    let at = try #require(invalidated[driver.run + item.name], "\(item.name): the registry invalidated the token")
                    let lag = at.timeIntervalSince(outcome.completedAt)
                    print("apns faults: \(item.name) invalidated \(String(format: "%.0f", lag * 1_000)) ms after its outcome")
                    #expect(lag < 3, "\(item.name): invalidated \(lag) s after the outcome (a few hundred ms when the machine is idle)")
                }
            }
            // A stalled push was resent: the same push (apns-id, timestamp) twice, nothing else.
            let stalled = try await stack.received(token: token("stall"))
            #expect(stalled.count == 2 && Set(stalled.map(\.apnsID)).count == 1 && Set(stalled.map(\.timestamp)).count == 1)
            let stats = try await stack.simulatorStats()
            print("apns faults: simulator \(stats.rejected), GOAWAYs \(stats.goAways), resets \(stats.resets), stalled \(stats.stalled), connections \(stats.connections)")
            #expect(!stats.rejected.keys.contains { $0.contains("TooManyProviderTokenUpdates") })
            #expect(stats.goAways >= 1 && stats.resets >= 1)
        }

        /// When token-registry first showed each activity's token as invalidated (polled every 20 ms, at most 90 s).
        func invalidationTimes(stack: Stack, activities: [String]) async throws -> [String: Date] {
            let jwt = try await stack.jwt(user: "user-1")
            var seen: [String: Date] = [:]
            let deadline = ContinuousClock.now + .seconds(90)
            while seen.count < activities.count, ContinuousClock.now < deadline {
                for activity in activities where seen[activity] == nil {
                    let (status, body) = try await HTTP.request(stack.url(.registry) + "/v1/activities/\(activity)", headers: [("Authorization", "Bearer \(jwt)")])
                    if status == 200, String(decoding: body, as: UTF8.self).contains("\"invalidated\"") { seen[activity] = Date() }
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            return seen
        }
    }
}
