import APNsSimulator
import Foundation
import IsletMessages
import IsletTesting
import NIOHTTP1
import Synchronization
import Testing

extension EndToEnd {
    /// Two instances of each service: token-registry, content-service and apns-dispatcher share
    /// their partitions; an app or a backend behind a load balancer reaches either (here: each call
    /// goes to the next instance in turn, as a round-robin balancer sends them).
    @Suite("End to end: two instances of each service behind one address", .timeLimit(.minutes(6)))
    struct ScaleOutTests {
        @Test("registrations through either registry reach the phone through either dispatcher; every lookup is answered 200 by either content-service (the owner's answer, forwarded), never 421; an Idempotency-Key repeat that reaches the other instance gets the first answer")
        func anyInstanceAnswers() async throws {
            let stack = try Stack(name: "scale-out")
            // Fixed ports: each instance is the other's peer (ISLET_CONTENT_PEERS, itself left out).
            let taken = [try TakenPort(), try TakenPort()]
            let ports = taken.map(\.port)
            taken.forEach { $0.close() }
            let peers = ports.map { "127.0.0.1:\($0)" }.joined(separator: ",")
            stack[.content].set("ISLET_HTTP_PORT", "\(ports[0])")
            stack[.content].set("ISLET_CONTENT_PEERS", peers)
            let instances = ports.map { "http://127.0.0.1:\($0)" }
            let others = Mutex<[ServiceProcess]>([])
            try await stack.run { driver in
                // Made once the stack runs: they copy its environment, the broker's address included.
                let second = stack.another(.content, instance: "b")
                second.set("ISLET_HTTP_PORT", "\(ports[1])")
                others.withLock { $0 = [second, stack.another(.registry, instance: "b"), stack.another(.dispatcher, instance: "b")] }
                let others = others.withLock { $0 }
                for other in others { try await other.start() }
                let registries = [stack.url(.registry), others[1].healthURL]
                // Activities registered through either registry and updated, spread over the three
                // partitions; their pushes go out through either dispatcher.
                var activities: [String] = []
                let before = try await stack.simulatorStats().accepted
                for number in 0..<9 {
                    let activity = "\(driver.run)scale-\(number)"
                    try await driver.registerActivity(
                        activity, token: Driver.token(activity), type: "DeliveryAttributes", bundleId: "com.example.food", registry: registries[number % 2])
                    try await driver.publish(
                        driver.event(activity, .update, type: "DeliveryAttributes", sequence: 1, fields: ["orderId": .string("\(number)"), "status": .string("preparing")]))
                    activities.append(activity)
                }
                try await stack.waitForPushes(9, within: .seconds(90), since: before)

                // Every activity through each instance: both answer 200 with the same state once the
                // group has settled; a 503 (partitions moving) is asked again; 421 never reaches the backend.
                let headers = [("Authorization", "Bearer \(stack.backendKey)")]
                var answers: [String: [Int32]] = [:]
                var misdirected = 0
                let deadline = ContinuousClock.now + .seconds(60)
                while answers.values.map(\.count).reduce(0, +) < activities.count * instances.count, ContinuousClock.now < deadline {
                    for activity in activities {
                        for instance in instances.indices where (answers[activity]?.count ?? 0) <= instance {
                            let (status, body) = try await HTTP.request(
                                instances[instance] + "/v1/activities/\(activity)?bundleId=com.example.food", headers: headers, timeout: .seconds(10))
                            if status == 421 { misdirected += 1 }
                            guard status == 200 else { continue }
                            let state = try IsletJSON.decodeValue(LookupState.self, from: body)
                            #expect(state.activityId == activity && state.lastSequence == 1 && state.token == "active")
                            answers[activity, default: []].append(state.partition)
                        }
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
                #expect(misdirected == 0, "\(misdirected) lookups answered 421")
                for activity in activities {
                    let partitions = answers[activity] ?? []
                    #expect(partitions.count == instances.count && Set(partitions).count == 1, "\(activity): \(partitions)")
                }
                // Each instance owns some partitions: half the lookups went to the other one.
                var forwarded = 0.0
                for instance in instances {
                    let (_, metrics) = try await HTTP.request(instance + "/metrics")
                    for line in String(decoding: metrics, as: UTF8.self).split(separator: "\n") where line.hasPrefix("islet_content_forwarded_total{") {
                        forwarded += Double(line.split(separator: " ").last ?? "0") ?? 0
                    }
                }
                #expect(forwarded > 0, "no lookup was forwarded: one instance owned every partition")

                // An event with an Idempotency-Key, sent to one instance and repeated to the other:
                // the same answer, the repeat marked replayed (the owner kept the first).
                for activity in activities.prefix(3) {
                    let body = try IsletJSON.encode(
                        ActivityEventBody(
                            driver.event(activity, .update, type: "DeliveryAttributes", sequence: 2, fields: ["orderId": .string("1"), "status": .string("courier_assigned")]),
                            bundleId: "com.example.food"))
                    let post = headers + [("Idempotency-Key", "\(activity)-step-2")]
                    let path = "/v1/activities/\(activity)/events"
                    let (firstStatus, _, first) = try await HTTP.exchange(instances[0] + path, method: .POST, headers: post, body: body, timeout: .seconds(10))
                    let (repeatStatus, repeatHeaders, repeated) = try await HTTP.exchange(instances[1] + path, method: .POST, headers: post, body: body, timeout: .seconds(10))
                    #expect(firstStatus == 202 && repeatStatus == 202, "\(firstStatus) \(String(decoding: first, as: UTF8.self)); \(repeatStatus)")
                    #expect(first == repeated, "\(String(decoding: first, as: UTF8.self)) / \(String(decoding: repeated, as: UTF8.self))")
                    #expect(repeatHeaders.first(name: "Idempotent-Replayed") == "true", "the repeat was not answered from the first answer")
                }
                // Before the stack's broker stops: each stops cleanly on SIGTERM.
                for other in others {
                    let (took, status) = await other.terminate(within: .seconds(15))
                    #expect(status == 0, "\(other.name.rawValue) b exited with \(status.map(String.init) ?? "nothing: killed") after \(took)")
                }
            }
            for other in others.withLock({ $0 }) { _ = await other.terminate(within: .seconds(15)) }
        }

        /// What the test reads of `GET /v1/activities/{id}`.
        struct LookupState: Decodable {
            var activityId: String
            var partition: Int32
            var token: String
            var lastSequence: Int64?
        }
    }
}
